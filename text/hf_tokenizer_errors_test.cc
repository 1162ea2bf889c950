// LoadHfTokenizer on edited copies of the fixtures: the refusals (each names
// the file and the field, and what is supported) and ignore_merges.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "text/hf_tokenizer.h"

namespace trellis::text {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kErrorFixtures = std::string(TRELLIS_SOURCE_DIR) + "/tests/fixtures/tokenizers";

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A copy of fixture `name` in a fresh directory.
class TokenizerDir {
 public:
  explicit TokenizerDir(const std::string& name)
      : dir_(::testing::TempDir() + "/tok_" + name + "_" + std::to_string(::getpid())) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const auto& entry : fs::directory_iterator(kErrorFixtures + "/" + name)) {
      fs::copy(entry.path(), dir_ + "/" + entry.path().filename().string());
    }
  }
  ~TokenizerDir() { fs::remove_all(dir_); }

  std::string path(const std::string& file) const { return dir_ + "/" + file; }
  // Rewrites a JSON file of the copy.
  void Edit(const std::string& file, const std::function<void(json&)>& edit) const {
    json root = json::parse(Read(path(file)));
    edit(root);
    Write(path(file), root.dump());
  }
  absl::Status Load() const { return LoadHfTokenizer(dir_).status(); }

 private:
  std::string dir_;
};

// A word that is a piece of the vocabulary is that piece under
// ignore_merges, whatever the merges would make of it.
TEST(HfTokenizerEdits, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  const std::string word = "\xC4\xA0zqxj";  // " zqxj" in the ByteLevel alphabet
  for (bool ignore : {true, false}) {
    const TokenizerDir dir("llama3");
    dir.Edit("tokenizer.json", [&](json& j) {
      j["model"]["vocab"][word] = 5000;
      j["model"]["ignore_merges"] = ignore;
    });
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadHfTokenizer(dir.path(""));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(" zqxj");
    ASSERT_TRUE(ids.ok()) << ids.status();
    if (ignore) {
      EXPECT_THAT(*ids, ElementsAre(5000));
    } else {
      EXPECT_GT(ids->size(), 1u);
    }
    EXPECT_EQ((*tokenizer)->Decode(*ids), " zqxj");
  }
}

TEST(HfTokenizerErrors, MissingDirectoryNamesBothFiles) {
  const absl::Status status = LoadHfTokenizer("/no/such/model").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("/no/such/model"), HasSubstr("tokenizer.json"),
                                      HasSubstr("tokenizer.model")));
}

TEST(HfTokenizerErrors, MalformedJsonNamesTheFile) {
  const TokenizerDir dir("gpt2");
  Write(dir.path("tokenizer.json"), "{\"model\": ");
  EXPECT_THAT(dir.Load().message(), HasSubstr(dir.path("tokenizer.json")));
  const TokenizerDir config("llama3");
  Write(config.path("tokenizer_config.json"), "[1, 2");
  EXPECT_THAT(config.Load().message(), HasSubstr(config.path("tokenizer_config.json")));
}

TEST(HfTokenizerErrors, UnsupportedModelTypeListsWhatIsSupported) {
  const TokenizerDir dir("gpt2");
  dir.Edit("tokenizer.json", [](json& j) { j["model"]["type"] = "WordPiece"; });
  const absl::Status status = dir.Load();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(dir.path("tokenizer.json")), HasSubstr("model.type"),
                    HasSubstr("\"WordPiece\" is not supported; supported: BPE")));
}

TEST(HfTokenizerErrors, UnsupportedNormalizerPreTokenizerAndDecoder) {
  const TokenizerDir dir("llama3");
  dir.Edit("tokenizer.json", [](json& j) { j["normalizer"] = {{"type", "NFKC"}}; });
  EXPECT_THAT(dir.Load().message(),
              AllOf(HasSubstr("normalizer"), HasSubstr("NFKC"), HasSubstr("supported: null, NFC")));

  const TokenizerDir pre("llama3");
  pre.Edit("tokenizer.json",
           [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["type"] = "Digits"; });
  EXPECT_THAT(pre.Load().message(), AllOf(HasSubstr("pre_tokenizer.pretokenizers[0]"),
                                          HasSubstr("Digits"), HasSubstr("supported: ByteLevel")));

  const TokenizerDir prefix("gpt2");
  prefix.Edit("tokenizer.json", [](json& j) { j["pre_tokenizer"]["add_prefix_space"] = true; });
  EXPECT_THAT(prefix.Load().message(), HasSubstr("add_prefix_space false"));

  const TokenizerDir decoder("qwen2");
  decoder.Edit("tokenizer.json", [](json& j) { j["decoder"] = {{"type", "Metaspace"}}; });
  EXPECT_THAT(decoder.Load().message(), AllOf(HasSubstr("decoder"), HasSubstr("Metaspace"),
                                              HasSubstr("supported: ByteLevel")));
}

TEST(HfTokenizerErrors, BadSplitPatternAndMergeNameTheField) {
  const TokenizerDir dir("qwen2");
  dir.Edit("tokenizer.json",
           [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}"; });
  EXPECT_THAT(dir.Load().message(), HasSubstr("pre_tokenizer.pretokenizers[0].pattern.Regex"));

  const TokenizerDir merges("llama3");
  merges.Edit("tokenizer.json", [](json& j) { j["model"]["merges"][3] = {"zz\xC3\xA9", "q"}; });
  EXPECT_THAT(merges.Load().message(),
              AllOf(HasSubstr("model.merges[3]"), HasSubstr("not in model.vocab")));
}

TEST(HfTokenizerErrors, StrippingAddedTokensAreRefused) {
  const TokenizerDir dir("gpt2");
  dir.Edit("tokenizer.json", [](json& j) { j["added_tokens"][0]["lstrip"] = true; });
  EXPECT_THAT(dir.Load().message(),
              AllOf(HasSubstr("added_tokens[0].lstrip"), HasSubstr("supported: false")));
}

TEST(HfTokenizerErrors, SpecialTokensOutsideTheVocabularyNameTheField) {
  const TokenizerDir dir("qwen2");
  dir.Edit("tokenizer_config.json", [](json& j) { j["eos_token"] = "<|nope|>"; });
  EXPECT_THAT(dir.Load().message(), AllOf(HasSubstr(dir.path("tokenizer_config.json")),
                                          HasSubstr("eos_token"), HasSubstr("<|nope|>")));

  const TokenizerDir generation("llama3");
  generation.Edit("generation_config.json", [](json& j) { j["eos_token_id"] = {1, "two"}; });
  EXPECT_THAT(
      generation.Load().message(),
      AllOf(HasSubstr(generation.path("generation_config.json")), HasSubstr("eos_token_id")));
}

TEST(HfTokenizerErrors, NoEosAnywhereIsRefused) {
  const TokenizerDir dir("qwen2");
  dir.Edit("tokenizer_config.json", [](json& j) { j.erase("eos_token"); });
  fs::remove(dir.path("generation_config.json"));
  EXPECT_THAT(dir.Load().message(), HasSubstr("no EOS token"));
}

TEST(HfTokenizerErrors, BrokenSentencePieceModelNamesTheFile) {
  const TokenizerDir dir("sentencepiece");
  Write(dir.path("tokenizer.model"), "not a model");
  EXPECT_THAT(dir.Load().message(), HasSubstr(dir.path("tokenizer.model")));
}

TEST(HfTokenizerErrors, InvalidUtf8IsRefusedNotCrashed) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadHfTokenizer(kErrorFixtures + "/llama3");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const absl::Status status = (*tokenizer)->Encode("ok \xFF\xFE bad").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("byte 3"));
}

}  // namespace
}  // namespace trellis::text
