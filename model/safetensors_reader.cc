// Reading safetensors files through a read-only memory mapping
// (SafetensorsReader, LoadSafetensors); the writer is model/safetensors.cc.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "env/regular_file.h"
#include "model/safetensors_dtypes.h"
#include "model/safetensors.h"

namespace trellis::model {
namespace {

using json = nlohmann::json;
using TensorInfo = SafetensorsReader::TensorInfo;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this code copies raw bytes");

// Larger headers are refused as corrupt (the reference implementation's cap).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

absl::Status DataLoss(const std::string& path, const std::string& why) {
  return absl::DataLossError(absl::StrCat("safetensors ", path, ": ", why));
}

// Validates one header entry against the data section of `data_size` bytes.
absl::Status ParseEntry(const std::string& path, const std::string& name, const json& v,
                        uint64_t data_size, TensorInfo* out) {
  auto bad = [&](const std::string& why) {
    return DataLoss(path, absl::StrCat("tensor '", name, "': ", why));
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
  const std::optional<torch::ScalarType> type =
      SafetensorsDtypeOf(dtype->get<std::string>());
  if (!type.has_value()) {
    return bad(absl::StrCat("unknown dtype '", dtype->get<std::string>(), "'"));
  }
  out->dtype = *type;
  uint64_t bytes = c10::elementSize(out->dtype);
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

// The header's tensors, sorted by offset, covering the data section exactly
// with no gaps or overlaps; its __metadata__ into *metadata.
absl::StatusOr<std::vector<TensorInfo>> ParseHeader(const std::string& path, const json& header,
                                                    uint64_t data_size,
                                                    std::map<std::string, std::string>* metadata) {
  std::vector<TensorInfo> tensors;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return DataLoss(path, "__metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          return DataLoss(path, absl::StrCat("__metadata__ '", mk, "' is not a string"));
        }
        (*metadata)[mk] = mv.get<std::string>();
      }
      continue;
    }
    TensorInfo info;
    if (absl::Status s = ParseEntry(path, key, value, data_size, &info); !s.ok()) return s;
    tensors.push_back(std::move(info));
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const TensorInfo& t : tensors) {
    if (t.begin != expected) {
      return DataLoss(path, absl::StrCat("tensor '", t.name, "' starts at ", t.begin, ", expected ",
                                         expected, " (overlap or gap)"));
    }
    expected = t.end;
  }
  if (expected != data_size) {
    return DataLoss(path, absl::StrCat("tensors cover ", expected,
                                       " bytes, but the data section holds ", data_size));
  }
  return tensors;
}

std::string ShapeString(c10::IntArrayRef shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool IsLoadDtype(torch::ScalarType t) {
  return t == torch::kFloat32 || t == torch::kBFloat16 || t == torch::kFloat16;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(
    const std::string& path) {
  std::unique_ptr<SafetensorsReader> r(new SafetensorsReader());
  r->path_ = path;
  absl::StatusOr<int> fd = env::OpenRegularFile(path);
  if (!fd.ok()) {
    return absl::Status(fd.status().code(), absl::StrCat("safetensors: ", fd.status().message()));
  }
  r->fd_ = *fd;
  struct stat st;
  if (::fstat(r->fd_, &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("safetensors: cannot stat ", path));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    return DataLoss(
        path, absl::StrCat("file is ", size, " bytes, shorter than the 8-byte header length"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, r->fd_, 0);
  if (map == MAP_FAILED) {
    return absl::ErrnoToStatus(errno, absl::StrCat("safetensors: cannot map ", path));
  }
  r->map_ = static_cast<char*>(map);
  r->map_size_ = size;
  // Read ahead eagerly; pages are dropped as tensors are copied out.
  ::madvise(map, size, MADV_SEQUENTIAL);
  uint64_t header_size;
  std::memcpy(&header_size, r->map_, sizeof(header_size));
  // The message never shows the length read: those are the file's first
  // bytes, whatever the file is.
  if (header_size > kMaxHeaderBytes || header_size > size - 8) {
    return DataLoss(path, absl::StrCat("the file is ", size,
                                       " bytes; expected safetensors, whose first 8 bytes give a "
                                       "header length within the file and at most ",
                                       kMaxHeaderBytes, " bytes"));
  }
  const char* header_begin = r->map_ + 8;
  const json header = json::parse(header_begin, header_begin + header_size, nullptr,
                                  /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return DataLoss(path, "header is not a JSON object");
  }
  r->data_offset_ = 8 + header_size;
  r->data_bytes_ = size - r->data_offset_;
  absl::StatusOr<std::vector<TensorInfo>> tensors =
      ParseHeader(path, header, r->data_bytes_, &r->metadata_);
  if (!tensors.ok()) return tensors.status();
  r->tensors_ = *std::move(tensors);
  return r;
}

SafetensorsReader::~SafetensorsReader() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<torch::Tensor> SafetensorsReader::Read(const TensorInfo& info,
                                                      std::optional<torch::ScalarType> dtype) {
  if (dtype.has_value() && !IsLoadDtype(*dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors ", path_, ": tensor '", info.name, "': cannot convert to ",
                     std::string(c10::toString(*dtype)), " (float32, bfloat16 or float16)"));
  }
  const bool convert = dtype.has_value() && c10::isFloatingType(info.dtype);
  torch::Tensor out;
  try {
    out = torch::empty(info.shape, torch::dtype(convert ? *dtype : info.dtype));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("safetensors ", path_, ": tensor '", info.name,
                                            "': ", e.what_without_backtrace()));
  }
  if (absl::Status s = ReadInto(info, out); !s.ok()) return s;
  return out;
}

absl::Status SafetensorsReader::ReadInto(const TensorInfo& info, const torch::Tensor& dst) {
  auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors ", path_, ": tensor '", info.name, "': ", why));
  };
  if (!dst.defined() || dst.sizes() != c10::IntArrayRef(info.shape)) {
    return invalid(absl::StrCat("expected shape ",
                                dst.defined() ? ShapeString(dst.sizes()) : "(undefined)", ", got ",
                                ShapeString(info.shape)));
  }
  if (!dst.is_contiguous() || !dst.device().is_cpu()) {
    return invalid("the destination is not a contiguous CPU tensor");
  }
  if (c10::isFloatingType(info.dtype) != dst.is_floating_point()) {
    return invalid(absl::StrCat("cannot copy ", std::string(c10::toString(info.dtype)), " into ",
                                std::string(c10::toString(dst.scalar_type()))));
  }
  const int64_t numel = dst.numel();
  if (numel == 0) return absl::OkStatus();
  const int64_t element = static_cast<int64_t>(c10::elementSize(info.dtype));
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes) / element);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  char* const data = map_ + data_offset_ + info.begin;
  try {
    torch::NoGradGuard no_grad;
    const torch::Tensor src = torch::from_blob(data, {numel}, torch::dtype(info.dtype));
    const torch::Tensor flat = dst.view({numel});
    for (int64_t at = 0; at < numel; at += chunk) {
      const int64_t n = std::min(chunk, numel - at);
      flat.narrow(0, at, n).copy_(src.narrow(0, at, n));
      // Drop the copied pages (rounded out to whole pages: a neighbour's
      // page dropped too is read again from the page cache).
      const uint64_t from = (data_offset_ + info.begin + at * element) / page * page;
      const uint64_t to = std::min(
          map_size_, (data_offset_ + info.begin + (at + n) * element + page - 1) / page * page);
      ::madvise(map_ + from, to - from, MADV_DONTNEED);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("safetensors ", path_, ": tensor '", info.name,
                                            "': ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::StatusOr<NamedTensors> LoadSafetensors(const std::string& path,
                                             std::map<std::string, std::string>* metadata,
                                             std::optional<torch::ScalarType> dtype) {
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader = SafetensorsReader::Open(path);
  if (!reader.ok()) return reader.status();
  NamedTensors out;
  for (const TensorInfo& info : (*reader)->tensors()) {
    absl::StatusOr<torch::Tensor> t = (*reader)->Read(info, dtype);
    if (!t.ok()) return t.status();
    out.emplace_back(info.name, *std::move(t));
  }
  if (metadata != nullptr) *metadata = (*reader)->metadata();
  return out;
}

}  // namespace trellis::model
