#include "text/internal/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace trellis::text::internal {
namespace {

std::string Lossy(const std::string& bytes) {
  std::string out;
  AppendUtf8Lossy(bytes, &out);
  return out;
}

// Python's bytes.decode("utf-8", "replace") gives the same strings (the
// same substitution of maximal subparts as Rust's from_utf8_lossy).
TEST(Utf8Test, IllFormedSubpartsBecomeOneReplacementEach) {
  const std::string r = kUtf8Replacement;
  EXPECT_EQ(Lossy("plain \xC3\xA9 \xF0\x9F\x98\x80"), "plain \xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(Lossy("a\xC3"), "a" + r);                   // a character cut short
  EXPECT_EQ(Lossy("\xE2\x82x"), r + "x");               // two bytes of three, then ASCII
  EXPECT_EQ(Lossy("\xF0\x9F\x98"), r);                  // three of four
  EXPECT_EQ(Lossy("\xED\xA0\x80"), r + r + r);          // a surrogate
  EXPECT_EQ(Lossy("\xC0\xAF"), r + r);                  // an overlong form
  EXPECT_EQ(Lossy("\x80\xBF"), r + r);                  // stray continuation bytes
  EXPECT_EQ(Lossy("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
}

}  // namespace
}  // namespace trellis::text::internal
