#include "observe/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace trellis::observe {
namespace {

// The check value of CRC-32C and the test vectors of RFC 3720, B.4.
TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(descending), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, MaskRotatesAndAddsTheConstant) {
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
  // 1 rotated right by 15 is 1 << 17.
  EXPECT_EQ(MaskCrc32c(1), (1u << 17) + 0xa282ead8u);
}

}  // namespace
}  // namespace trellis::observe
