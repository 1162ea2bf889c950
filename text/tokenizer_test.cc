#include "text/tokenizer.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::text {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CharTokenizerTest, DefaultVocabularyIsPrintableAsciiAfterSpecials) {
  auto tok = NewCharTokenizer();
  EXPECT_EQ(tok->pad_id(), 0);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_THAT(tok->eos_ids(), ElementsAre(2));
  EXPECT_TRUE(tok->IsEos(2));
  EXPECT_FALSE(tok->IsEos(0));
  EXPECT_EQ(tok->vocab_size(), 3 + 95);
  auto ids = tok->Encode(" ~");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(3, 3 + 94));
}

TEST(CharTokenizerTest, EncodeDecodeRoundtrip) {
  auto tok = NewCharTokenizer();
  const std::string text = "12+34=46, Hello {World}!";
  auto ids = tok->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), text.size());
  EXPECT_EQ(tok->Decode(*ids), text);
}

TEST(CharTokenizerTest, DecodeSkipsSpecialsAndMarksUnknownIds) {
  auto tok = NewCharTokenizer("ab");
  std::vector<int32_t> ids = {1, 3, 0, 4, 2, 99, -1};
  EXPECT_EQ(tok->Decode(ids), "ab\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(CharTokenizerTest, CustomAlphabet) {
  auto tok = NewCharTokenizer("0123456789+-=");
  EXPECT_EQ(tok->vocab_size(), 16);
  auto ids = tok->Encode("7+5=12");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(10, 13, 8, 15, 4, 5));
  EXPECT_EQ(tok->Decode(*ids), "7+5=12");
}

TEST(CharTokenizerTest, UnknownCharacterIsInvalidArgumentNamingCharAndOffset) {
  auto tok = NewCharTokenizer("0123456789+-=");
  auto ids = tok->Encode("12*3");
  ASSERT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("'*'"));
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("offset 2"));

  auto nonprint = NewCharTokenizer()->Encode("a\nb");
  ASSERT_EQ(nonprint.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(nonprint.status().message()), HasSubstr("0x0a"));
  EXPECT_THAT(std::string(nonprint.status().message()), HasSubstr("offset 1"));
}

}  // namespace
}  // namespace trellis::text
