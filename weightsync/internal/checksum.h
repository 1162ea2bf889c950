#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_CHECKSUM_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_CHECKSUM_H_

// The 64-bit checksum of weight buckets and fingerprints: XXH3 (64-bit,
// seed 0) from Debian's libxxhash, which runs at memory speed. Not
// cryptographic: it detects corruption, not tampering. Every sender and
// receiver of every transport computes it through these two entry points.

#include <cstddef>
#include <cstdint>
#include <memory>

struct XXH3_state_s;

namespace trellis::weightsync::internal {

// The checksum of `n` bytes at `data`.
uint64_t Checksum64(const void* data, size_t n);

// Checksum64 of a byte stream fed in pieces of any sizes, so that a bucket
// can be checked while its later parts are still arriving (or packed while
// it is written): Update(a); Update(b); Finish() == Checksum64(a + b).
class Checksum64Stream {
 public:
  Checksum64Stream();
  // Starts over, as if freshly made.
  void Reset();
  void Update(const void* data, size_t n);
  uint64_t Finish() const;

 private:
  struct FreeState {
    void operator()(XXH3_state_s* state) const;
  };
  std::unique_ptr<XXH3_state_s, FreeState> state_;
};

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_CHECKSUM_H_
