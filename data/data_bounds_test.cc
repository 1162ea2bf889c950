// A data file's bounds (data/dataset.h, docs/jobs.md "Limits"), checked
// while reading: a line past kMaxLineBytes (never read whole), a chat of
// more than kMaxChatMessages turns, a message past kMaxMessageBytes; each
// a clear error naming the file and line.

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::data {
namespace {

using ::testing::HasSubstr;

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

const std::string kGood = R"({"prompt": "1+1=", "answer": "2"})" "\n";

TEST(DataBounds, ALineLongerThanTheBoundIsRefusedNamingItsLine) {
  const std::string path = Write(
      "long_line.jsonl",
      absl::StrCat(kGood, R"({"prompt": ")", std::string(kMaxLineBytes * 4, 'x'), "\"}\n"));
  for (const auto& read : {ReadJsonl, ReadSftJsonl}) {
    const absl::Status s = read(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(path, ":2: longer than ", kMaxLineBytes,
                                                    " bytes, the most a line holds")));
  }
  const std::string pairs = Write(
      "long_pair.jsonl", absl::StrCat(R"({"prompt": "1+1=", "chosen": "2", "rejected": "3"})",
                                      "\n", std::string(kMaxLineBytes + 1, ' '), "\n"));
  const absl::Status s = ReadPreferenceJsonl(pairs).status();
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(pairs, ":2: longer than")));
}

TEST(DataBounds, ALineJustWithinTheBoundIsRead) {
  const std::string prompt(kMaxLineBytes - 40, 'x');
  const std::string path = Write(
      "just_within.jsonl", absl::StrCat(R"({"prompt": ")", prompt, R"(", "answer": "1"})", "\n"));
  absl::StatusOr<std::vector<Example>> examples = ReadJsonl(path);
  ASSERT_TRUE(examples.ok()) << examples.status();
  ASSERT_EQ(examples->size(), 1u);
  EXPECT_EQ((*examples)[0].prompt.size(), prompt.size());
}

TEST(DataBounds, AChatOfTooManyMessagesIsRefused) {
  std::string messages;
  for (size_t i = 0; i <= kMaxChatMessages; ++i) {
    absl::StrAppend(&messages, i == 0 ? "" : ",", R"({"role": "user", "content": "hi"})");
  }
  const std::string path =
      Write("many_turns.jsonl", absl::StrCat(kGood, R"({"messages": [)", messages,
                                             R"(], "answer": "1"})", "\n"));
  const absl::Status s = ReadJsonl(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat(path, ":2: \"messages\" holds ", kMaxChatMessages + 1,
                                     " turns; a chat holds at most ", kMaxChatMessages)));
}

TEST(DataBounds, AMessageLargerThanTheBoundIsRefused) {
  const std::string path = Write(
      "big_message.jsonl",
      absl::StrCat(R"({"messages": [{"role": "user", "content": ")",
                   std::string(kMaxMessageBytes, 'x'), R"("}]})", "\n"));
  const absl::Status s = ReadSftJsonl(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(path, ":1: messages[0] is ")));
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("bytes of JSON; a message holds at most ", kMaxMessageBytes)));
}

}  // namespace
}  // namespace trellis::data
