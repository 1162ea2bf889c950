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
#include "model/internal/safetensors_dtypes.h"

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
  std::vector<torch::Tensor> cpu;
  json header = json::object();
  uint64_t offset = 0;
  try {
    std::set<std::string> names;
    for (const auto& [name, tensor] : tensors) {
      if (name == "__metadata__" || !names.insert(name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("SaveSafetensors ", path, ": duplicate or reserved name '", name, "'"));
      }
      if (!tensor.defined()) {
        return absl::InvalidArgumentError(
            absl::StrCat("SaveSafetensors ", path, ": tensor '", name, "' is undefined"));
      }
      const char* dtype = internal::SafetensorsDtypeName(tensor.scalar_type());
      if (dtype == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("SaveSafetensors ", path, ": tensor '", name, "' has unsupported dtype ",
                         std::string(c10::toString(tensor.scalar_type()))));
      }
      cpu.push_back(tensor.detach().to(torch::kCPU).contiguous());
      const uint64_t bytes = cpu.back().nbytes();
      header[name] = {{"dtype", dtype},
                      {"shape", tensor.sizes().vec()},
                      {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("SaveSafetensors ", path, ": ", e.what_without_backtrace()));
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  char length[8];
  uint64_t n = text.size();
  std::memcpy(length, &n, sizeof(n));

  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "SaveSafetensors: cannot create", tmp);
  bool ok = WriteAll(fd, length, sizeof(length)) && WriteAll(fd, text.data(), text.size());
  for (size_t i = 0; ok && i < cpu.size(); ++i) {
    ok = WriteAll(fd, static_cast<const char*>(cpu[i].data_ptr()), cpu[i].nbytes());
  }
  ok = ok && ::fsync(fd) == 0;
  const int error = errno;
  ok = (::close(fd) == 0) && ok;
  if (!ok) {
    ::unlink(tmp.c_str());
    return ErrnoError(error, "SaveSafetensors: cannot write", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    ::unlink(tmp.c_str());
    return ErrnoError(rename_error, "SaveSafetensors: cannot rename to", path);
  }
  return absl::OkStatus();
}

}  // namespace trellis::model
