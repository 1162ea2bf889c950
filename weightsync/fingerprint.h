#ifndef TRELLIS_WEIGHTSYNC_FINGERPRINT_H_
#define TRELLIS_WEIGHTSYNC_FINGERPRINT_H_

// Fingerprints of weight sets. With LoRA only the adapters travel to the
// actors; the learner publishes its frozen base's fingerprint beside them
// under kBaseFingerprint, and an actor refuses adapters whose base is not
// its own (built from another seed or init_checkpoint).

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "weightsync/transport.h"

namespace trellis::weightsync {

inline constexpr char kBaseFingerprint[] = "lora.base_fingerprint";

// A 64-bit checksum of every tensor's name, dtype, shape and values, in
// order. Not cryptographic: it tells bases apart, it does not resist forgery.
uint64_t Fingerprint(const NamedTensors& tensors);

// `fingerprint` as a tensor to publish (int64 [1]), and back.
at::Tensor FingerprintTensor(uint64_t fingerprint);
uint64_t FingerprintOf(const at::Tensor& tensor);

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_FINGERPRINT_H_
