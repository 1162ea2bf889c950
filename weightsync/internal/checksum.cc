#include "weightsync/internal/checksum.h"

#include <algorithm>
#include <cstring>

namespace trellis::weightsync::internal {
namespace {

// Large odd constants with well-spread bits (multiplication by an odd
// number is invertible mod 2^64).
constexpr uint64_t kMul1 = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kMul2 = 0xD6E8FEB86659FD93ull;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t Load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Bijective in `acc` for a fixed `word`, and in `word` for a fixed `acc`.
inline uint64_t Round(uint64_t acc, uint64_t word) {
  return Rotl((acc ^ word) * kMul1, 29);
}

// The 64-bit finalizer: xor-shift and multiply, all invertible.
inline uint64_t Mix(uint64_t h) {
  h ^= h >> 32;
  h *= kMul2;
  h ^= h >> 29;
  h *= kMul1;
  h ^= h >> 32;
  return h;
}

constexpr uint64_t kSeeds[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull,
                                0xA4093822299F31D0ull, 0x082EFA98EC4E6C89ull};

// Consumes the whole 32-byte blocks of [p, p + n); returns how many bytes.
size_t Blocks(uint64_t lanes[4], const unsigned char* p, size_t n) {
  uint64_t a = lanes[0], b = lanes[1], c = lanes[2], d = lanes[3];
  const unsigned char* const start = p;
  const unsigned char* const end = p + n / 32 * 32;
  while (p < end) {
    a = Round(a, Load64(p));
    b = Round(b, Load64(p + 8));
    c = Round(c, Load64(p + 16));
    d = Round(d, Load64(p + 24));
    p += 32;
  }
  lanes[0] = a;
  lanes[1] = b;
  lanes[2] = c;
  lanes[3] = d;
  return static_cast<size_t>(p - start);
}

// Folds the lanes, the tail (< 32 bytes) and the total length.
uint64_t Final(const uint64_t lanes[4], const unsigned char* p, size_t n,
               size_t total) {
  const unsigned char* const end = p + n;
  // Each lane enters through a bijection, so a change in one lane survives.
  uint64_t h = Rotl(lanes[0], 1) + Rotl(lanes[1], 17) + Rotl(lanes[2], 33) +
               Rotl(lanes[3], 49);
  while (end - p >= 8) {
    h = Round(h, Load64(p));
    p += 8;
  }
  if (p < end) {
    uint64_t last = 0;
    std::memcpy(&last, p, static_cast<size_t>(end - p));
    h = Round(h, last);
  }
  h = Round(h, static_cast<uint64_t>(total));
  return Mix(h);
}

}  // namespace

uint64_t Checksum64(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t lanes[4] = {kSeeds[0], kSeeds[1], kSeeds[2], kSeeds[3]};
  const size_t done = Blocks(lanes, p, n);
  return Final(lanes, p + done, n - done, n);
}

Checksum64Stream::Checksum64Stream() {
  std::memcpy(lanes_, kSeeds, sizeof(lanes_));
}

void Checksum64Stream::Update(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += n;
  if (num_pending_ > 0) {
    const size_t take = std::min(n, sizeof(pending_) - num_pending_);
    std::memcpy(pending_ + num_pending_, p, take);
    num_pending_ += take;
    p += take;
    n -= take;
    if (num_pending_ < sizeof(pending_)) return;
    Blocks(lanes_, pending_, sizeof(pending_));
    num_pending_ = 0;
  }
  const size_t done = Blocks(lanes_, p, n);
  std::memcpy(pending_, p + done, n - done);
  num_pending_ = n - done;
}

uint64_t Checksum64Stream::Finish() const {
  return Final(lanes_, pending_, num_pending_, total_);
}

}  // namespace trellis::weightsync::internal
