#include "weightsync/internal/checksum.h"

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

}  // namespace

uint64_t Checksum64(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* const end = p + n;
  uint64_t a = 0x243F6A8885A308D3ull;
  uint64_t b = 0x13198A2E03707344ull;
  uint64_t c = 0xA4093822299F31D0ull;
  uint64_t d = 0x082EFA98EC4E6C89ull;
  while (end - p >= 32) {
    a = Round(a, Load64(p));
    b = Round(b, Load64(p + 8));
    c = Round(c, Load64(p + 16));
    d = Round(d, Load64(p + 24));
    p += 32;
  }
  // Each lane enters through a bijection, so a change in one lane survives.
  uint64_t h = Rotl(a, 1) + Rotl(b, 17) + Rotl(c, 33) + Rotl(d, 49);
  while (end - p >= 8) {
    h = Round(h, Load64(p));
    p += 8;
  }
  if (p < end) {
    uint64_t last = 0;
    std::memcpy(&last, p, static_cast<size_t>(end - p));
    h = Round(h, last);
  }
  h = Round(h, static_cast<uint64_t>(n));
  return Mix(h);
}

}  // namespace trellis::weightsync::internal
