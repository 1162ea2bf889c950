// The Hugging Face tokenizers against what `tokenizers` and sentencepiece
// give on the committed fixtures (tests/fixtures/tokenizers, made by
// scripts/make_tokenizer_fixtures.sh).
#include "text/hf_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trellis/v1/job.pb.h"

namespace trellis::text {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

const std::string kFixtures = std::string(TRELLIS_SOURCE_DIR) + "/tests/fixtures/tokenizers";

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

std::unique_ptr<Tokenizer> Load(const std::string& name) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadHfTokenizer(kFixtures + "/" + name);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, EncodesEveryLineAsTheLibraryDoesAndDecodesItBack) {
  const std::unique_ptr<Tokenizer> tokenizer = Load(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  const json corpus = ReadJson(kFixtures + "/corpus.json");
  const json reference = ReadJson(kFixtures + "/" + GetParam() + "/reference.json");
  ASSERT_EQ(corpus.size(), reference["ids"].size());
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string line = corpus[i].get<std::string>();
    SCOPED_TRACE(testing::Message() << "line " << i << ": " << json(line).dump());
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(line);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_THAT(*ids, ElementsAreArray(reference["ids"][i].get<std::vector<int32_t>>()));
    // Special tokens decode to nothing; every other line comes back whole.
    const std::string decoded = tokenizer->Decode(*ids);
    EXPECT_EQ(decoded, reference["decoded"][i].get<std::string>());
    if (line.find("<|") == std::string::npos) EXPECT_EQ(decoded, line);
  }
}

TEST_P(FixtureTest, SpecialIdsAreTheDirectorysOwn) {
  const std::unique_ptr<Tokenizer> tokenizer = Load(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  const json reference = ReadJson(kFixtures + "/" + GetParam() + "/reference.json");
  if (reference["bos"].is_null()) {
    EXPECT_EQ(tokenizer->bos_id(), std::nullopt);
  } else {
    EXPECT_EQ(tokenizer->bos_id(), reference["bos"].get<int32_t>());
  }
  const std::vector<int32_t> eos = reference["eos"].get<std::vector<int32_t>>();
  EXPECT_THAT(tokenizer->eos_ids(), ElementsAreArray(eos));
  EXPECT_EQ(tokenizer->eos_id(), eos.front());
  for (int32_t id : eos) EXPECT_TRUE(tokenizer->IsEos(id));
  EXPECT_EQ(tokenizer->pad_id(), reference["pad"].get<int32_t>());
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, FixtureTest,
                         ::testing::Values("gpt2", "llama3", "qwen2", "sentencepiece"),
                         [](const auto& info) { return info.param; });

TEST(HfTokenizerTest, SpecialTokensAreNeverSplit) {
  const std::unique_ptr<Tokenizer> qwen2 = Load("qwen2");
  ASSERT_NE(qwen2, nullptr);
  absl::StatusOr<std::vector<int32_t>> alone = qwen2->Encode("<|im_start|>");
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_EQ(alone->size(), 1u);
  const int32_t im_start = alone->front();
  absl::StatusOr<std::vector<int32_t>> inside = qwen2->Encode("ab<|im_start|><|im_start|>cd");
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(std::count(inside->begin(), inside->end(), im_start), 2);
  // An unfinished marker is plain text.
  absl::StatusOr<std::vector<int32_t>> partial = qwen2->Encode("<|im_start");
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_EQ(std::count(partial->begin(), partial->end(), im_start), 0);
  EXPECT_EQ(qwen2->Decode(*partial), "<|im_start");
}

TEST(HfTokenizerTest, EncodeAddsNoBosOrEos) {
  const std::unique_ptr<Tokenizer> llama3 = Load("llama3");
  ASSERT_NE(llama3, nullptr);
  absl::StatusOr<std::vector<int32_t>> ids = llama3->Encode("Hi");
  ASSERT_TRUE(ids.ok()) << ids.status();
  for (int32_t id : *ids) {
    EXPECT_NE(id, *llama3->bos_id());
    EXPECT_FALSE(llama3->IsEos(id));
  }
}

TEST(HfTokenizerTest, EosListQwen2PadAndNoBos) {
  const std::unique_ptr<Tokenizer> qwen2 = Load("qwen2");
  ASSERT_NE(qwen2, nullptr);
  const int32_t im_end = (*qwen2->Encode("<|im_end|>"))[0];
  const int32_t endoftext = (*qwen2->Encode("<|endoftext|>"))[0];
  EXPECT_EQ(qwen2->bos_id(), std::nullopt);
  EXPECT_THAT(qwen2->eos_ids(), ElementsAre(im_end, endoftext));
  EXPECT_EQ(qwen2->eos_id(), im_end);
  EXPECT_EQ(qwen2->pad_id(), endoftext);
}

TEST(HfTokenizerTest, PadFallsBackToThePrimaryEos) {
  const std::unique_ptr<Tokenizer> gpt2 = Load("gpt2");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(gpt2->pad_id(), gpt2->eos_id());
  EXPECT_EQ(gpt2->bos_id(), gpt2->eos_id());  // GPT-2's <|endoftext|> is both
}

TEST(HfTokenizerTest, DecodeDropsSpecialsKeepsAddedTokensAndMarksUnknownIds) {
  const std::unique_ptr<Tokenizer> gpt2 = Load("gpt2");
  ASSERT_NE(gpt2, nullptr);
  absl::StatusOr<std::vector<int32_t>> ids = gpt2->Encode("a<|endoftext|><tool>b");
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 4u);
  EXPECT_EQ(gpt2->Decode(*ids), "a<tool>b");
  EXPECT_EQ(gpt2->Decode({-1, gpt2->vocab_size()}), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(HfTokenizerTest, SentencePieceCutsOutControlTokensWrittenInText) {
  const std::unique_ptr<Tokenizer> sp = Load("sentencepiece");
  ASSERT_NE(sp, nullptr);
  absl::StatusOr<std::vector<int32_t>> ids = sp->Encode("<s>Hello</s>");
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GE(ids->size(), 3u);
  EXPECT_EQ(ids->front(), *sp->bos_id());
  EXPECT_EQ(ids->back(), sp->eos_id());
  EXPECT_EQ(sp->Decode(*ids), "Hello");
}

// libsentencepiece's own protobuf copy must not meet libprotobuf, which
// this binary links as every Trellis binary does.
TEST(HfTokenizerTest, SentencePieceLivesBesideProtobuf) {
  const std::unique_ptr<Tokenizer> sp = Load("sentencepiece");
  ASSERT_NE(sp, nullptr);
  v1::ModelConfig config;
  config.set_d_model(sp->vocab_size());
  v1::ModelConfig parsed;
  ASSERT_TRUE(parsed.ParseFromString(config.SerializeAsString()));
  EXPECT_EQ(parsed.d_model(), sp->vocab_size());
}

}  // namespace
}  // namespace trellis::text
