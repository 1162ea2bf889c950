#include "weightsync/fingerprint.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>

#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/checksum.h"

namespace trellis::weightsync {

uint64_t Fingerprint(const NamedTensors& tensors) {
  internal::Checksum64Stream stream;
  for (const auto& [name, tensor] : tensors) {
    stream.Update(name.data(), name.size() + 1);  // with its terminator
    const int64_t header[2] = {static_cast<int64_t>(tensor.scalar_type()), tensor.dim()};
    stream.Update(header, sizeof(header));
    stream.Update(tensor.sizes().data(), tensor.dim() * sizeof(int64_t));
    const at::Tensor host = internal::HostCopy(tensor);
    stream.Update(host.data_ptr(), host.nbytes());
  }
  return stream.Finish();
}

at::Tensor FingerprintTensor(uint64_t fingerprint) {
  at::Tensor t = at::empty({1}, at::kLong);
  std::memcpy(t.data_ptr<int64_t>(), &fingerprint, sizeof(fingerprint));
  return t;
}

uint64_t FingerprintOf(const at::Tensor& tensor) {
  const at::Tensor host = internal::HostCopy(tensor);
  uint64_t fingerprint = 0;
  std::memcpy(&fingerprint, host.data_ptr<int64_t>(), sizeof(fingerprint));
  return fingerprint;
}

}  // namespace trellis::weightsync
