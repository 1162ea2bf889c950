#ifndef TRELLIS_DATA_INTERNAL_RANDOM_H_
#define TRELLIS_DATA_INTERNAL_RANDOM_H_

// Portable random helpers. std::mt19937_64's output is fixed by the
// standard, but std::uniform_int_distribution and std::shuffle differ
// between standard libraries, so datasets draw through these instead.

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace trellis::data::internal {

// Uniform integer in [lo, hi] (REQUIRES: lo <= hi), without modulo bias:
// draws below 2^64 mod range are rejected.
inline uint64_t UniformInt(std::mt19937_64& rng, uint64_t lo, uint64_t hi) {
  const uint64_t range = hi - lo + 1;  // 0 means the full 2^64 range.
  if (range == 0) return rng();
  const uint64_t reject_below = (0 - range) % range;
  uint64_t x = rng();
  while (x < reject_below) x = rng();
  return lo + x % range;
}

// Fisher-Yates: for i from the back, swap i with a uniform j in [0, i].
template <typename T>
void Shuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    std::swap(v[i - 1], v[UniformInt(rng, 0, i - 1)]);
  }
}

// SplitMix64's finalizer: spreads nearby inputs (seed, seed + 1) apart.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace trellis::data::internal

#endif  // TRELLIS_DATA_INTERNAL_RANDOM_H_
