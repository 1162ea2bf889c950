// What the rollout evaluations write to OUT/eval/<label>.jsonl: every
// held-out item's prompt, response, answer and verdict, one line each, the
// unscored items of an incomplete evaluation marked.

#include "loop/eval_answers.h"

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "env/run_dir.h"
#include "gtest/gtest.h"
#include "loop/driver.h"
#include "loop/testing/fake_roles.h"
#include "loop/testing/out_dir.h"
#include "nlohmann/json.hpp"

namespace trellis::loop {
namespace {

// A GRPO run of one step against the fakes, on held-out prompts "4+1=" and
// "5+1=", evaluated one prompt a batch.
struct EvalRun {
  EvalRun() : format(text::NewCharTokenizer(), absl::NotFoundError("no chat template")) {
    job.set_algorithm("grpo");
    job.mutable_sft()->set_steps(0);
    job.mutable_grpo()->set_steps(1);
    job.mutable_grpo()->set_prompts_per_step(2);
    job.mutable_grpo()->set_responses_per_prompt(2);
    job.mutable_eval()->set_batch_size(1);
    for (uint64_t i = 0; i < 6; ++i) {
      data::Example ex;
      ex.id = i;
      ex.prompt = std::to_string(i) + "+1=";
      ex.answer = std::to_string(i + 1);
      (i < 4 ? split.train : split.eval).push_back(ex);
    }
  }
  absl::Status Run() {
    Driver driver(job, fakes.roles(), &format, split, &ledger, out, &progress);
    return driver.Run();
  }
  // OUT/eval/<label>.jsonl, a JSON object a line.
  std::vector<nlohmann::json> Answers(const std::string& label) const {
    absl::StatusOr<std::string> text =
        env::Env::Default()->ReadFile(env::RunDir(out).EvalAnswers(label));
    EXPECT_TRUE(text.ok()) << text.status();
    std::vector<nlohmann::json> lines;
    for (absl::string_view line : absl::StrSplit(text.value_or(""), '\n', absl::SkipEmpty())) {
      lines.push_back(nlohmann::json::parse(line));
    }
    return lines;
  }

  const std::string out = testing::FreshOutDir();
  v1::JobConfig job;
  data::Split split;
  testing::FakeRoles fakes;
  PromptFormat format;
  ledger::Ledger ledger;
  std::ostringstream progress;
};

TEST(EvalAnswersTest, EachEvaluationWritesItsItemsInOrder) {
  EvalRun run;
  ASSERT_TRUE(run.Run().ok()) << run.progress.str();
  absl::StatusOr<std::vector<std::string>> labels = EvalLabels(env::Env::Default(), run.out);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(*labels, std::vector<std::string>({"before", "after"}));
  const std::vector<nlohmann::json> before = run.Answers("before");
  ASSERT_EQ(before.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(before[i]["eval"], "before");
    EXPECT_EQ(before[i]["index"], i);
    EXPECT_EQ(before[i]["prompt_id"], 4 + i);
    EXPECT_EQ(before[i]["prompt"], std::to_string(4 + i) + "+1=");
    EXPECT_EQ(before[i]["response"], std::to_string(5 + i));
    EXPECT_EQ(before[i]["answer"], std::to_string(5 + i));
    EXPECT_EQ(before[i]["verdict"], "correct");
    EXPECT_EQ(before[i]["reward"], 1.0);
    EXPECT_EQ(before[i]["scored"], true);
    EXPECT_FALSE(before[i].contains("failure"));
  }
  EXPECT_EQ(run.Answers("after").size(), 2u);
}

// The verifier dies after the first evaluation (its two batches, two
// calls): the evaluation after leaves "5+1=" unscored (after its retries),
// and its file says so.
TEST(EvalAnswersTest, AnIncompleteEvaluationMarksItsUnscoredItems) {
  EvalRun run;
  run.fakes.verifier.fail_from_call = 2;
  run.fakes.verifier.fail_prompt = "5+1=";
  ASSERT_TRUE(run.Run().ok()) << run.progress.str();
  const std::vector<nlohmann::json> after = run.Answers("after");
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0]["scored"], true);
  EXPECT_EQ(after[0]["verdict"], "correct");
  EXPECT_EQ(after[1]["prompt"], "5+1=");
  EXPECT_EQ(after[1]["response"], "6");
  EXPECT_EQ(after[1]["scored"], false);
  EXPECT_EQ(after[1]["verdict"], "error");
  EXPECT_EQ(after[1]["failure"], "call_failed");
  for (const nlohmann::json& item : run.Answers("before")) EXPECT_EQ(item["scored"], true);
}

// A repeated evaluation (a resumed run redoing one) replaces its file.
TEST(EvalAnswersTest, ARepeatedEvaluationReplacesItsFile) {
  EvalRun run;
  ASSERT_TRUE(run.Run().ok());
  ASSERT_TRUE(run.Run().ok());
  EXPECT_EQ(run.Answers("before").size(), 2u);
  EXPECT_EQ(run.Answers("after").size(), 2u);
}

// RUN/eval may not lead out of the run directory.
TEST(EvalAnswersTest, ALinkOutOfTheRunDirectoryIsRefused) {
  const std::string out = testing::FreshOutDir();
  const std::string outside = out + "/outside";
  std::filesystem::create_directories(out + "/run");
  std::filesystem::create_directories(outside);
  std::filesystem::create_directory_symlink(outside, out + "/run/eval");
  const absl::Status s = WriteEvalAnswers(env::Env::Default(), out + "/run", "after", {});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_FALSE(std::filesystem::exists(outside + "/after.jsonl"));
}

TEST(EvalAnswersTest, LabelsComeInTheOrderTheRunWroteThem) {
  const std::string out = testing::FreshOutDir();
  for (const char* label : {"after", "step_20", "before", "step_3"}) {
    ASSERT_TRUE(WriteEvalAnswers(env::Env::Default(), out, label, {}).ok());
  }
  absl::StatusOr<std::vector<std::string>> labels = EvalLabels(env::Env::Default(), out);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(*labels, std::vector<std::string>({"before", "step_3", "step_20", "after"}));
}

}  // namespace
}  // namespace trellis::loop
