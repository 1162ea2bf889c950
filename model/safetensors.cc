#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
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

namespace trellis::model {
namespace {

using json = nlohmann::json;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this code copies raw bytes");

// Larger headers are refused as corrupt (the reference implementation's cap).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

struct DtypeName {
  const char* name;
  torch::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
    {"F64", torch::kFloat64}, {"I64", torch::kInt64},   {"I32", torch::kInt32},
    {"I16", torch::kInt16},   {"I8", torch::kInt8},     {"U8", torch::kUInt8},
    {"BOOL", torch::kBool},
};

const char* NameOf(torch::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  return nullptr;
}

bool TypeOf(const std::string& name, torch::ScalarType* type) {
  for (const auto& d : kDtypes) {
    if (name == d.name) {
      *type = d.type;
      return true;
    }
  }
  return false;
}

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

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return ErrnoError(errno, "safetensors: cannot open", path);
  std::string contents;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) contents.append(buffer, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::DataLossError(absl::StrCat("safetensors: read error on ", path));
  return contents;
}

// One parsed header entry.
struct Entry {
  std::string name;
  torch::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

// Validates one header entry against the data section of `data_size` bytes.
absl::Status ParseEntry(const std::string& path, const std::string& name, const json& v,
                        uint64_t data_size, Entry* out) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(
        absl::StrCat("safetensors ", path, ": tensor '", name, "': ", why));
  };
  if (!v.is_object()) return bad("header entry is not an object");
  auto dtype = v.find("dtype");
  auto shape = v.find("shape");
  auto offsets = v.find("data_offsets");
  if (dtype == v.end() || !dtype->is_string()) return bad("missing string 'dtype'");
  if (shape == v.end() || !shape->is_array()) return bad("missing array 'shape'");
  if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return bad("'data_offsets' must be two non-negative integers");
  }
  out->name = name;
  if (!TypeOf(dtype->get<std::string>(), &out->type)) {
    return bad(absl::StrCat("unknown dtype '", dtype->get<std::string>(), "'"));
  }
  uint64_t bytes = c10::elementSize(out->type);
  for (const auto& dim : *shape) {
    if (!dim.is_number_unsigned()) return bad("shape entries must be non-negative integers");
    const uint64_t d = dim.get<uint64_t>();
    if (d > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, d, &bytes)) {
      return bad("shape is too large");
    }
    out->shape.push_back(static_cast<int64_t>(d));
  }
  out->begin = (*offsets)[0].get<uint64_t>();
  out->end = (*offsets)[1].get<uint64_t>();
  if (out->begin > out->end || out->end > data_size) {
    return bad(absl::StrCat("data_offsets [", out->begin, ", ", out->end,
                            "] outside the data section of ", data_size, " bytes"));
  }
  if (out->end - out->begin != bytes) {
    return bad(absl::StrCat("data_offsets span ", out->end - out->begin,
                            " bytes, but dtype and shape need ", bytes));
  }
  return absl::OkStatus();
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
      const char* dtype = NameOf(tensor.scalar_type());
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

absl::StatusOr<NamedTensors> LoadSafetensors(const std::string& path,
                                             std::map<std::string, std::string>* metadata) {
  absl::StatusOr<std::string> file = ReadFile(path);
  if (!file.ok()) return file.status();
  const std::string& bytes = *file;
  if (bytes.size() < 8) {
    return absl::DataLossError(absl::StrCat("safetensors ", path, ": file is ", bytes.size(),
                                            " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), sizeof(header_size));
  if (header_size > kMaxHeaderBytes || header_size > bytes.size() - 8) {
    return absl::DataLossError(absl::StrCat("safetensors ", path, ": header length ", header_size,
                                            " exceeds the file (", bytes.size(),
                                            " bytes) or the limit"));
  }
  const char* header_begin = bytes.data() + 8;
  json header = json::parse(header_begin, header_begin + header_size, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::DataLossError(
        absl::StrCat("safetensors ", path, ": header is not a JSON object"));
  }
  const uint64_t data_size = bytes.size() - 8 - header_size;
  const char* data = header_begin + header_size;

  std::vector<Entry> entries;
  std::map<std::string, std::string> meta;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) {
        return absl::DataLossError(
            absl::StrCat("safetensors ", path, ": __metadata__ is not an object"));
      }
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          return absl::DataLossError(absl::StrCat("safetensors ", path, ": __metadata__ '",
                                                  mk, "' is not a string"));
        }
        meta[mk] = mv.get<std::string>();
      }
      continue;
    }
    Entry entry;
    absl::Status s = ParseEntry(path, key, value, data_size, &entry);
    if (!s.ok()) return s;
    entries.push_back(std::move(entry));
  }
  // The data section must be covered exactly, in order, with no gaps.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.begin != expected) {
      return absl::DataLossError(absl::StrCat("safetensors ", path, ": tensor '", e.name,
                                              "' starts at ", e.begin, ", expected ", expected,
                                              " (overlap or gap)"));
    }
    expected = e.end;
  }
  if (expected != data_size) {
    return absl::DataLossError(absl::StrCat("safetensors ", path, ": tensors cover ", expected,
                                            " bytes, but the data section holds ", data_size));
  }

  NamedTensors out;
  try {
    for (const Entry& e : entries) {
      torch::Tensor t = torch::empty(e.shape, torch::dtype(e.type));
      if (e.end > e.begin) std::memcpy(t.data_ptr(), data + e.begin, e.end - e.begin);
      out.emplace_back(e.name, std::move(t));
    }
  } catch (const c10::Error& ex) {
    return absl::InternalError(
        absl::StrCat("safetensors ", path, ": ", ex.what_without_backtrace()));
  }
  if (metadata != nullptr) *metadata = std::move(meta);
  return out;
}

}  // namespace trellis::model
