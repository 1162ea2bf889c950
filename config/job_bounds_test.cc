// A job file's bounds (docs/jobs.md "Limits"): a document's size and what
// it expands to, aliases counted; a long list of duplicates reported once;
// names and paths without control characters; user strings escaped where
// they are echoed. Each case ends in a clear error quickly.

#include <string>

#include "absl/strings/str_cat.h"
#include "config/field_text.h"
#include "config/job_config.h"
#include "config/printable.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::Status Validate(const std::string& yaml) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml(yaml, "job.yaml");
  return job.ok() ? ValidateJob(*job) : job.status();
}

TEST(JobBounds, TenThousandDuplicatesAreOneMessage) {
  std::string list;
  for (int i = 0; i < 10'000; ++i) absl::StrAppend(&list, i == 0 ? "" : ", ", "q_proj");
  const absl::Status s = Validate(absl::StrCat("memory: {lora: {rank: 4, target_modules: [v_proj, ",
                                               list, "]}}\n"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("memory.lora.target_modules[2]: must name each entry once, "
                                     "found q_proj again (first at [1]; 9999 entries repeat an "
                                     "earlier one)"));
  EXPECT_LT(s.message().size(), 1000u) << "one message, not one per pair";
}

// Aliases of one 1 MiB string, 64 uses: a 1 MiB file that would read as
// 64 MiB of commands.
TEST(JobBounds, AnAliasBombIsRefusedNamingTheFile) {
  std::string uses;
  for (int i = 0; i < 64; ++i) absl::StrAppend(&uses, i == 0 ? "" : ", ", "*big");
  const std::string yaml = absl::StrCat("name: &big \"", std::string(1 << 20, 'a'), "\"\n",
                                        "verifier: {command: [", uses, "]}\n");
  const absl::Status s = ParseJobYaml(yaml, "bomb.yaml").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("bomb.yaml:"));
  EXPECT_THAT(s.message(), HasSubstr(": verifier.command["));
  EXPECT_THAT(s.message(), HasSubstr("the document expands past its bounds (100000 values, "
                                     "4194304 bytes of text; every use of a YAML alias counts)"));
}

TEST(JobBounds, ADocumentPastFourMebibytesIsRefused) {
  const std::string yaml = absl::StrCat("name: \"", std::string((4 << 20) + 1, 'a'), "\"\n");
  const absl::Status s = ParseJobYaml(yaml, "big.yaml").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("big.yaml: more than 4194304 bytes, the most a job or "
                                     "config file holds"));
}

TEST(JobBounds, NamesAndPathsHoldNoControlCharacters) {
  absl::Status s = Validate("data: {train_path: \"train\\0.jsonl\", eval_path: e.jsonl}\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("data.train_path: must be free of control characters (a "
                                     "name, path or address), found \"train\\x00.jsonl\" (\\x00 "
                                     "at byte 5)"));
  s = Validate("name: \"\\e[31mred\\e[0m\"\n");
  EXPECT_THAT(s.message(), HasSubstr("name: must be free of control characters"));
  EXPECT_THAT(s.message(), HasSubstr("\"\\x1b[31mred\\x1b[0m\""));
  EXPECT_THAT(s.message(), Not(HasSubstr("\x1b")));
  // Text fields may hold line breaks and tabs, not escapes.
  EXPECT_TRUE(Validate("verifier: {pattern: \"a\\tb\\n\"}\n").ok());
  s = Validate("environment: {turn_stop: \"\\e\"}\n");
  EXPECT_THAT(s.message(), HasSubstr("environment.turn_stop: must be free of control characters "
                                     "other than tab and line breaks"));
}

TEST(Printable, EscapesEveryControlCharacterAndCuts) {
  EXPECT_EQ(Printable("a\x1b[2Jb\n\t\r"), "a\\x1b[2Jb\\n\\t\\r");
  EXPECT_EQ(Printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(Printable("\xc2\x9b" "31m \xc3\xa9"), "\\u009b31m \xc3\xa9");
  EXPECT_EQ(Printable("abcdef", 3), "abc...");
  EXPECT_EQ(Printable("a\nb\x1b", 0, "\n"), "a\nb\\x1b");
  EXPECT_EQ(FirstControl("ab\tc"), 2u);
  EXPECT_EQ(FirstControl("ab\tc", "\t"), std::string::npos);
}

TEST(FieldText, ReadsAFieldAsAJobFileDoes) {
  v1::VerifierConfig c;
  const auto* d = c.GetDescriptor();
  EXPECT_TRUE(SetFieldText("RLIMITS", d->FindFieldByName("sandbox"), &c).ok());
  EXPECT_EQ(c.sandbox(), v1::VerifierConfig::RLIMITS);
  EXPECT_TRUE(SetFieldText("2.5", d->FindFieldByName("tolerance"), &c).ok());
  EXPECT_EQ(c.tolerance(), 2.5);
  EXPECT_TRUE(SetFieldText("python3", d->FindFieldByName("command"), &c).ok());
  EXPECT_TRUE(SetFieldText("-c", d->FindFieldByName("command"), &c).ok());
  EXPECT_EQ(c.command_size(), 2);
  const absl::Status s = SetFieldText("jail", d->FindFieldByName("sandbox"), &c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("rlimits"));
  EXPECT_THAT(s.message(), HasSubstr("\"jail\""));
}

}  // namespace
}  // namespace trellis::config
