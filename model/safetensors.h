#ifndef TRELLIS_MODEL_SAFETENSORS_H_
#define TRELLIS_MODEL_SAFETENSORS_H_

// The safetensors format, read and written here: an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, and
// "__metadata__": {str: str}}, then the raw little-endian tensor bytes.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trellis::model {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Writes atomically (temporary file, then rename). Supports F32, F16, BF16,
// F64, I64, I32, I8, U8, BOOL.
[[nodiscard]] absl::Status SaveSafetensors(
    const std::string& path, const NamedTensors& tensors,
    const std::map<std::string, std::string>& metadata = {});

// One tensor of a file written a tensor at a time.
struct TensorSpec {
  std::string name;
  torch::ScalarType dtype = torch::kFloat32;
  std::vector<int64_t> shape;
};

// A safetensors file written one tensor at a time (a sharded learner's
// export: each unit as it is gathered), so that the writer never holds more
// than the tensor it is given: the header first, from every tensor's spec,
// then each tensor's bytes in the specs' order. Atomic as SaveSafetensors:
// the file appears at `path` only on Finish; a writer destroyed before
// leaves nothing.
class SafetensorsWriter {
 public:
  // InvalidArgument for a duplicate or reserved name or an unsupported
  // dtype; an errno status when the temporary file cannot be written.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Open(
      const std::string& path, const std::vector<TensorSpec>& specs,
      const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();

  // The next spec's tensor (converted to the spec's dtype, moved to the
  // host). InvalidArgument when its shape is not the spec's or every spec
  // was written.
  [[nodiscard]] absl::Status Append(const torch::Tensor& tensor);
  // FailedPrecondition unless every spec was written; then fsync and rename.
  [[nodiscard]] absl::Status Finish();

 private:
  SafetensorsWriter(std::string path, std::string tmp, int fd, std::vector<TensorSpec> specs);

  const std::string path_, tmp_;
  int fd_;
  const std::vector<TensorSpec> specs_;
  size_t next_ = 0;
};

// A safetensors file mapped read-only (mmap). Open parses and validates
// the header; Read and ReadInto copy one tensor out of the mapping in
// chunks of kChunkBytes, releasing each chunk's pages from the process
// (madvise MADV_DONTNEED) once copied, so reading a file of any size keeps
// about one chunk of it in the process's memory (the kernel's page cache
// aside). Conversions: a floating-point tensor may land in float32,
// bfloat16 or float16; other tensors keep their stored dtype. Not
// thread-safe. A file changed on disk while open is undefined (a file cut
// short under the mapping raises SIGBUS).
class SafetensorsReader {
 public:
  static constexpr uint64_t kChunkBytes = 4u << 20;

  struct TensorInfo {
    std::string name;
    torch::ScalarType dtype;
    std::vector<int64_t> shape;
    // Byte offsets in the data section (the header's data_offsets).
    uint64_t begin = 0, end = 0;
  };

  // Fails with DataLoss on a truncated or malformed file, naming the path
  // and the tensor or header field at fault; with the errno's code when the
  // file cannot be opened or mapped.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(
      const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  // In the order of their bytes in the file.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Bytes of tensor data (the file less its header).
  uint64_t data_bytes() const { return data_bytes_; }

  // `info` (one of tensors()) as a new tensor: in its stored dtype, or
  // converted to `dtype` (float32, bfloat16 or float16) when it is set and
  // the tensor is floating-point.
  [[nodiscard]] absl::StatusOr<torch::Tensor> Read(
      const TensorInfo& info, std::optional<torch::ScalarType> dtype = std::nullopt);
  // Copies `info` into `dst`, converting to dst's dtype. Fails, naming the
  // path and the tensor, when dst is not contiguous, differs in shape, or
  // one of the two is floating-point and the other is not.
  [[nodiscard]] absl::Status ReadInto(const TensorInfo& info, const torch::Tensor& dst);

 private:
  SafetensorsReader() = default;

  std::string path_;
  int fd_ = -1;
  char* map_ = nullptr;
  uint64_t map_size_ = 0;
  uint64_t data_offset_ = 0;  // where the data section starts in the file
  uint64_t data_bytes_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Every tensor of `path` (SafetensorsReader), in file order: in its stored
// dtype, or with floating-point tensors converted to `dtype`. The process
// holds the tensors and about one chunk of the file at a time.
[[nodiscard]] absl::StatusOr<NamedTensors> LoadSafetensors(
    const std::string& path, std::map<std::string, std::string>* metadata = nullptr,
    std::optional<torch::ScalarType> dtype = std::nullopt);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_SAFETENSORS_H_
