#include "text/internal/regex.h"

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::text::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Split(absl::string_view pattern, absl::string_view text) {
  absl::StatusOr<Regex> regex = Regex::Compile(pattern);
  EXPECT_TRUE(regex.ok()) << regex.status();
  std::vector<absl::string_view> pieces;
  EXPECT_TRUE(regex->Split(text, &pieces).ok());
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

TEST(RegexTest, KeepsMatchesAndTheTextBetweenThem) {
  EXPECT_THAT(Split("[0-9]+", "ab12cd345"), ElementsAre("ab", "12", "cd", "345"));
  EXPECT_THAT(Split("x", ""), ElementsAre());
}

TEST(RegexTest, ClassesAreUnicode) {
  // \s takes the ideographic and em spaces, \p{L} Cyrillic and CJK letters.
  EXPECT_THAT(Split(R"(\s+)", "a\u3000\u2003b"), ElementsAre("a", "\u3000\u2003", "b"));
  EXPECT_THAT(Split(R"(\p{L}+)", "мир, 世界!"), ElementsAre("мир", ", ", "世界", "!"));
  EXPECT_THAT(Split(R"(\p{N}{1,3})", "12345"), ElementsAre("123", "45"));
}

TEST(RegexTest, EmptyMatchesMoveOnByWholeCharacters) {
  EXPECT_THAT(Split("x*", "é😀"), ElementsAre("é😀"));
}

TEST(RegexTest, BadPatternNamesTheOffset) {
  absl::StatusOr<Regex> regex = Regex::Compile("(ab");
  ASSERT_FALSE(regex.ok());
  EXPECT_THAT(regex.status().message(), HasSubstr("offset 3"));
}

}  // namespace
}  // namespace trellis::text::internal
