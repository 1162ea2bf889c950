#ifndef TRELLIS_MODEL_SAFETENSORS_H_
#define TRELLIS_MODEL_SAFETENSORS_H_

// The safetensors format, read and written here: an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, and
// "__metadata__": {str: str}}, then the raw little-endian tensor bytes.

#include <map>
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

// Fails with DataLoss on a truncated or malformed file, naming the path and
// the tensor or header field at fault.
[[nodiscard]] absl::StatusOr<NamedTensors> LoadSafetensors(
    const std::string& path,
    std::map<std::string, std::string>* metadata = nullptr);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_SAFETENSORS_H_
