// ReadExamples on the Parquet fixtures of tests/fixtures/parquet
// (scripts/make_parquet_fixtures.sh): plain and chat columns, shards, and
// one file per fault, each refused naming the file and column.

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::data {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kFixtures = std::string(TRELLIS_SOURCE_DIR) + "/tests/fixtures/parquet/";

v1::DataColumns Columns(const std::string& prompt, const std::string& messages) {
  v1::DataColumns c;
  c.set_prompt(prompt);
  c.set_messages(messages);
  return c;
}

absl::StatusOr<std::vector<Example>> Read(const std::string& path, bool sft = false) {
  return ReadExamples(kFixtures + path, v1::DataColumns(), sft);
}

TEST(Parquet, ReadsShardsOfPlainColumnsInNameOrder) {
  absl::StatusOr<std::vector<Example>> train = ReadExamples(
      kFixtures + "plain/data/train-*.parquet", Columns("question", "messages"), false);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_EQ(train->size(), 40u);
  EXPECT_EQ((*train)[0].prompt, "70+42=");
  EXPECT_EQ((*train)[0].answer, "112");
  EXPECT_EQ((*train)[20].prompt, "20+43=");  // the second shard's first row
  EXPECT_EQ((*train)[20].answer, "63");
  for (size_t i = 0; i < train->size(); ++i) {
    EXPECT_EQ((*train)[i].id, i);
    EXPECT_TRUE((*train)[i].messages_json.empty());
  }
}

TEST(Parquet, ReadsADirectoryAndASingleFile) {
  const v1::DataColumns cols = Columns("question", "messages");
  absl::StatusOr<std::vector<Example>> dir = ReadExamples(kFixtures + "plain/data", cols, false);
  ASSERT_TRUE(dir.ok()) << dir.status();
  // test-00000 sorts before both train shards.
  ASSERT_EQ(dir->size(), 48u);
  EXPECT_EQ((*dir)[0].prompt, "51+25=");
  EXPECT_EQ((*dir)[8].prompt, "70+42=");
  absl::StatusOr<std::vector<Example>> one =
      ReadExamples(kFixtures + "plain/data/test-00000-of-00001.parquet", cols, false);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 8u);
  EXPECT_EQ((*one)[1].prompt, "56+49=");
  EXPECT_EQ((*one)[1].answer, "105");
}

TEST(Parquet, ReadsChatColumns) {
  absl::StatusOr<std::vector<Example>> chat = ReadExamples(
      kFixtures + "chat/data/train-*.parquet", Columns("prompt", "conversations"), false);
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_EQ(chat->size(), 40u);
  EXPECT_EQ((*chat)[0].messages_json, R"([{"role":"user","content":"70+42="}])");
  EXPECT_EQ((*chat)[0].answer, "112");
  EXPECT_TRUE((*chat)[0].prompt.empty());
}

TEST(Parquet, NumberAnswersReadAsJsonLinesDo) {
  absl::StatusOr<std::vector<Example>> ex = Read("numbers.parquet");
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_EQ(ex->size(), 2u);
  EXPECT_EQ((*ex)[0].answer, "3");
  EXPECT_EQ((*ex)[1].answer, "2.5");
}

TEST(Parquet, SupervisedChatsMayHaveNoAnswerColumn) {
  absl::StatusOr<std::vector<Example>> sft = Read("sft_chat.parquet", /*sft=*/true);
  ASSERT_TRUE(sft.ok()) << sft.status();
  ASSERT_EQ(sft->size(), 1u);
  EXPECT_EQ((*sft)[0].messages_json,
            R"([{"role":"user","content":"1+2="},{"role":"assistant","content":"3"}])");
  EXPECT_TRUE((*sft)[0].answer.empty());
  EXPECT_THAT(Read("sft_chat.parquet").status().message(),
              HasSubstr("no column \"answer\" (data.columns.answer)"));
}

TEST(Parquet, JsonLinesStillReadByName) {
  const std::string path = ::testing::TempDir() + "/plain.jsonl";
  std::ofstream(path) << R"({"prompt": "1+2=", "answer": 3})"
                      << "\n";
  absl::StatusOr<std::vector<Example>> ex = ReadExamples(path, v1::DataColumns(), false);
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_EQ(ex->size(), 1u);
  EXPECT_EQ((*ex)[0].answer, "3");
}

struct BadCase {
  std::string file;
  std::vector<std::string> says;
};

class ParquetBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(ParquetBad, IsRefusedNamingTheFileAndWhere) {
  const absl::Status s = Read("bad/" + GetParam().file).status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(kFixtures + "bad/" + GetParam().file));
  for (const std::string& part : GetParam().says) EXPECT_THAT(s.message(), HasSubstr(part));
}

INSTANTIATE_TEST_SUITE_P(
    Faults, ParquetBad,
    ::testing::Values(
        BadCase{"not_parquet.parquet", {"not a Parquet file"}},
        BadCase{"truncated.parquet", {"not a Parquet file"}},
        BadCase{"corrupt_page.parquet", {"row group 0, column \"prompt\" (data.columns.prompt): "}},
        BadCase{"prompt_int.parquet",
                {"column \"prompt\" (data.columns.prompt) is int64; expected a string"}},
        BadCase{"null_prompt.parquet",
                {"row group 1, row 3: column \"prompt\" (data.columns.prompt) is null"}},
        BadCase{"missing_answer.parquet",
                {"no column \"answer\" (data.columns.answer); the file's columns: \"prompt\""}},
        BadCase{"both.parquet", {"both column \"prompt\"", "expected one"}},
        BadCase{"chat_null_role.parquet", {"row group 0, row 0: ", "messages[0] has a null"}},
        BadCase{"chat_empty.parquet", {"row group 0, row 1: ", "an empty list"}},
        BadCase{
            "chat_sharegpt.parquet",
            {"column \"messages\" (data.columns.messages) is list<", "expected a list of structs"}},
        BadCase{"chat_too_many.parquet", {"1025 turns; a chat holds at most 1024"}}),
    [](const ::testing::TestParamInfo<BadCase>& info) {
      return info.param.file.substr(0, info.param.file.find('.'));
    });

TEST(Parquet, EmptyDirectoryAndUnmatchedPatternAreRefused) {
  const std::string dir = ::testing::TempDir() + "/no_shards";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/README.md") << "not a shard\n";
  absl::Status s = ReadExamples(dir, v1::DataColumns(), false).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr(dir), HasSubstr("no Parquet files")));
  s = Read("plain/data/validation-*.parquet").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr("validation-*.parquet"));
}

TEST(Parquet, AShardsFaultNamesThatShard) {
  const std::string dir = ::testing::TempDir() + "/shards_one_bad";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kFixtures + "numbers.parquet", dir + "/train-00000.parquet");
  std::filesystem::copy_file(kFixtures + "bad/null_prompt.parquet", dir + "/train-00001.parquet");
  const absl::Status s = ReadExamples(dir, v1::DataColumns(), false).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr(dir + "/train-00001.parquet: row group 1, row 3")));
}

}  // namespace
}  // namespace trellis::data
