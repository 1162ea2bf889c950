#include "tools/verify_command.h"

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::tools {
namespace {

using ::testing::HasSubstr;

TEST(VerifyCommand, PrintsAVerdictTable) {
  const std::string path = ::testing::TempDir() + "/samples.jsonl";
  std::ofstream(path) << R"({"prompt": "1+1=", "response": "2", "answer": "2"})" "\n"
                      << R"({"prompt": "2+2=", "response": "5", "answer": 4})" "\n\n"
                      << R"({"prompt": "3+3=", "response": "six", "answer": "6"})" "\n";
  std::ostringstream out, err;
  EXPECT_EQ(VerifyCommand({"--verifier", "math", "--config", "tolerance=0.5", "--items", path},
                          out, err), 0) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("verifier math: 3 samples"));
  EXPECT_THAT(out.str(), HasSubstr("CORRECT\t1"));
  EXPECT_THAT(out.str(), HasSubstr("WRONG\t1"));
  EXPECT_THAT(out.str(), HasSubstr("UNPARSEABLE\t1"));
  EXPECT_THAT(out.str(), HasSubstr("2\tWRONG\t0\tlast number \"5\""));

  std::ostringstream out2, err2;
  EXPECT_EQ(VerifyCommand({"--verifier", "math", "--config", "nope=1", path}, out2, err2), 2);
  EXPECT_THAT(err2.str(), HasSubstr("nope"));
  EXPECT_EQ(VerifyCommand({"--verifier", "nosuch", path}, out2, err2), 2);
  EXPECT_EQ(VerifyCommand({path}, out2, err2), 2);
  EXPECT_EQ(VerifyCommand({"--verifier", "math", "/nonexistent.jsonl"}, out2, err2), 1);
}

// --config reads a field as a job file does: a choice by its name.
TEST(VerifyCommand, TakesChoicesByNameAsJobsDo) {
  std::ostringstream out, err;
  EXPECT_EQ(VerifyCommand({"--verifier", "code_exec", "--config", "sandbox=bogus",
                           "/nonexistent.jsonl"},
                          out, err),
            2);
  EXPECT_THAT(err.str(), HasSubstr("--config sandbox: expected one of"));
  EXPECT_THAT(err.str(), HasSubstr("rlimits"));
  EXPECT_THAT(err.str(), HasSubstr("\"bogus\""));
  std::ostringstream out2, err2;
  VerifyCommand({"--verifier", "code_exec", "--config", "sandbox=rlimits", "--config",
                 "cpu_seconds=2", "/nonexistent.jsonl"},
                out2, err2);
  EXPECT_THAT(err2.str(), ::testing::Not(HasSubstr("--config"))) << err2.str();
}

}  // namespace
}  // namespace trellis::tools
