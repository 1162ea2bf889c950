#include "model/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/safetensors_dtypes.h"

namespace trellis::model {
namespace {

using json = nlohmann::json;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this code copies raw bytes");

absl::Status ErrnoError(int error, const std::string& what, const std::string& path) {
  return absl::ErrnoToStatus(error, absl::StrCat(what, " ", path));
}

// Writes all of `data` to fd, retrying short writes.
bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

absl::Status SaveSafetensors(const std::string& path, const NamedTensors& tensors,
                             const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SaveSafetensors ", path, ": tensor '", name, "' is undefined"));
    }
    specs.push_back({name, tensor.scalar_type(), tensor.sizes().vec()});
  }
  absl::StatusOr<std::unique_ptr<SafetensorsWriter>> writer =
      SafetensorsWriter::Open(path, specs, metadata);
  if (!writer.ok()) return writer.status();
  for (const auto& [name, tensor] : tensors) {
    if (absl::Status s = (*writer)->Append(tensor); !s.ok()) return s;
  }
  return (*writer)->Finish();
}

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Open(
    const std::string& path, const std::vector<TensorSpec>& specs,
    const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const TensorSpec& spec : specs) {
    if (spec.name == "__metadata__" || !names.insert(spec.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("SaveSafetensors ", path, ": duplicate or reserved name '", spec.name, "'"));
    }
    const char* dtype = SafetensorsDtypeName(spec.dtype);
    if (dtype == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("SaveSafetensors ", path, ": tensor '", spec.name,
                       "' has unsupported dtype ", std::string(c10::toString(spec.dtype))));
    }
    uint64_t bytes = c10::elementSize(spec.dtype);
    for (int64_t d : spec.shape) bytes *= static_cast<uint64_t>(d);
    header[spec.name] = {
        {"dtype", dtype}, {"shape", spec.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  char length[8];
  const uint64_t n = text.size();
  std::memcpy(length, &n, sizeof(n));

  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "SaveSafetensors: cannot create", tmp);
  std::unique_ptr<SafetensorsWriter> writer(new SafetensorsWriter(path, tmp, fd, specs));
  if (!WriteAll(fd, length, sizeof(length)) || !WriteAll(fd, text.data(), text.size())) {
    return ErrnoError(errno, "SaveSafetensors: cannot write", tmp);
  }
  return writer;
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::string tmp, int fd,
                                     std::vector<TensorSpec> specs)
    : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd), specs_(std::move(specs)) {}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

absl::Status SafetensorsWriter::Append(const torch::Tensor& tensor) {
  if (next_ == specs_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SaveSafetensors ", path_, ": every one of its ", specs_.size(),
                     " tensors is written already"));
  }
  const TensorSpec& spec = specs_[next_];
  if (!tensor.defined() || tensor.sizes().vec() != spec.shape) {
    return absl::InvalidArgumentError(absl::StrCat("SaveSafetensors ", path_, ": tensor '",
                                                   spec.name, "' is not of its declared shape"));
  }
  torch::Tensor cpu;
  try {
    cpu = tensor.detach().to(torch::kCPU, spec.dtype).contiguous();
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("SaveSafetensors ", path_, ": ", e.what_without_backtrace()));
  }
  if (!WriteAll(fd_, static_cast<const char*>(cpu.data_ptr()), cpu.nbytes())) {
    return ErrnoError(errno, "SaveSafetensors: cannot write", tmp_);
  }
  ++next_;
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Finish() {
  if (next_ != specs_.size()) {
    return absl::FailedPreconditionError(absl::StrCat("SaveSafetensors ", path_, ": ", next_,
                                                      " of ", specs_.size(),
                                                      " tensors written"));
  }
  bool ok = ::fsync(fd_) == 0;
  const int error = errno;
  ok = (::close(fd_) == 0) && ok;
  fd_ = -1;
  if (!ok) {
    ::unlink(tmp_.c_str());
    return ErrnoError(error, "SaveSafetensors: cannot write", tmp_);
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int rename_error = errno;
    ::unlink(tmp_.c_str());
    return ErrnoError(rename_error, "SaveSafetensors: cannot rename to", path_);
  }
  return absl::OkStatus();
}

}  // namespace trellis::model
