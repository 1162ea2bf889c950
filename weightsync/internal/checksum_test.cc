#include "weightsync/internal/checksum.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace trellis::weightsync::internal {
namespace {

std::vector<unsigned char> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

// The wire format: XXH3 64-bit with seed 0. Every transport's sender and
// receiver compute it, so a change must reach them all at once.
TEST(Checksum64Test, IsXxh3) {
  EXPECT_EQ(Checksum64("", 0), 0x2D06800538D394C2ull);
  Checksum64Stream empty;
  EXPECT_EQ(empty.Finish(), 0x2D06800538D394C2ull);
}

TEST(Checksum64Test, IsDeterministic) {
  const auto a = RandomBytes(1000, 1);
  EXPECT_EQ(Checksum64(a.data(), a.size()), Checksum64(a.data(), a.size()));
}

TEST(Checksum64Test, EverySingleByteFlipIsDetected) {
  // Sizes around the 8- and 32-byte strides exercise every code path.
  for (size_t n : {1u, 7u, 8u, 9u, 31u, 32u, 33u, 100u, 257u}) {
    auto data = RandomBytes(n, static_cast<uint32_t>(n));
    const uint64_t good = Checksum64(data.data(), n);
    for (size_t i = 0; i < n; ++i) {
      for (unsigned char mask : {0x01, 0x80, 0xFF}) {
        data[i] ^= mask;
        EXPECT_NE(Checksum64(data.data(), n), good) << "n=" << n << " i=" << i;
        data[i] ^= mask;
      }
    }
  }
}

TEST(Checksum64Test, LengthMatters) {
  const std::vector<unsigned char> zeros(64, 0);
  EXPECT_NE(Checksum64(zeros.data(), 0), Checksum64(zeros.data(), 1));
  EXPECT_NE(Checksum64(zeros.data(), 8), Checksum64(zeros.data(), 9));
  EXPECT_NE(Checksum64(zeros.data(), 32), Checksum64(zeros.data(), 64));
}

TEST(Checksum64Test, SwappedWordsAcrossLanesDiffer) {
  auto data = RandomBytes(64, 7);
  const uint64_t good = Checksum64(data.data(), data.size());
  std::swap_ranges(data.begin(), data.begin() + 8, data.begin() + 8);
  EXPECT_NE(Checksum64(data.data(), data.size()), good);
}

}  // namespace
}  // namespace trellis::weightsync::internal

namespace trellis::weightsync::internal {
namespace {

TEST(Checksum64StreamTest, AnySplitMatchesTheOneShot) {
  for (size_t n : {0u, 1u, 31u, 32u, 33u, 100u, 1000u}) {
    const auto data = RandomBytes(n, 11);
    const uint64_t whole = Checksum64(data.data(), n);
    for (size_t piece : {1u, 3u, 8u, 31u, 32u, 45u, 1000u}) {
      Checksum64Stream s;
      for (size_t off = 0; off < n; off += piece) {
        s.Update(data.data() + off, std::min(piece, n - off));
      }
      EXPECT_EQ(s.Finish(), whole) << "n=" << n << " piece=" << piece;
    }
  }
}

TEST(Checksum64StreamTest, ResetStartsOver) {
  const auto data = RandomBytes(300, 5);
  Checksum64Stream s;
  s.Update(data.data(), 100);
  s.Reset();
  s.Update(data.data(), data.size());
  EXPECT_EQ(s.Finish(), Checksum64(data.data(), data.size()));
}

}  // namespace
}  // namespace trellis::weightsync::internal
