#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_CHECKSUM_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_CHECKSUM_H_

#include <cstddef>
#include <cstdint>

namespace trellis::weightsync::internal {

// A fast 64-bit checksum of `n` bytes at `data` for weight buckets.
//
// Four independent multiply-xor lanes consume 32 bytes per round, so the
// multiplications overlap and it runs at several GB/s; the tail and the
// length are then folded in and the result finalized with a 64-bit mixer.
// Every step is a bijection of the state for a fixed input word, so a change
// confined to one 8-byte word (any single flipped byte or bit) always changes
// the result. Not cryptographic: it detects corruption, not tampering.
uint64_t Checksum64(const void* data, size_t n);

// Checksum64 of a byte stream fed in pieces of any sizes, so that a bucket
// can be checked while its later parts are still arriving:
// Update(a); Update(b); Finish() == Checksum64(a + b).
class Checksum64Stream {
 public:
  Checksum64Stream();
  void Update(const void* data, size_t n);
  uint64_t Finish() const;

 private:
  uint64_t lanes_[4];
  unsigned char pending_[32];
  size_t num_pending_ = 0;
  size_t total_ = 0;
};

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_CHECKSUM_H_
