// `trellis run` trains from Parquet shards in the Hugging Face hub's layout
// (tests/fixtures/parquet): plain columns on the default model, chat
// columns on examples/models/qwen2_arith, each job shortened by an
// --override file, as a user would.

#include <sys/wait.h>

#include <filesystem>
#include <map>
#include <string>

#include "config/job_config.h"
#include "gtest/gtest.h"
#include "loop/recipe.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

const std::string kShards = std::string(TRELLIS_SOURCE_DIR) + "/tests/fixtures/parquet/";

// Runs `job` with `trellis run JOB --override OVERRIDE --out ROOT/run`, the
// override setting 2 GRPO steps; returns the run's step records.
std::map<int64_t, nlohmann::json> RunShortened(const std::string& name, const v1::JobConfig& job) {
  const fs::path root = fs::path(::testing::TempDir()) / "parquet_job_test" / name;
  fs::remove_all(root);
  fs::create_directories(root);
  testing_util::WriteText(root / "job.yaml", config::ResolvedJobYaml(job));
  testing_util::WriteText(root / "short.yaml", "grpo: {steps: 2}\nsft: {steps: 1}\n");
  const int status = testing_util::Wait(
      testing_util::StartTrellis({"run", (root / "job.yaml").string(), "--override",
                                  (root / "short.yaml").string(), "--out", (root / "run").string()},
                                 root / "run.log"));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << testing_util::Slurp(root / "run.log");
  return testing_util::StepRecords(root / "run");
}

TEST(ParquetJobTest, TrainsOnPlainColumnShards) {
  v1::JobConfig job = testing_util::TinyJob();
  job.mutable_data()->set_train_path(kShards + "plain/data/train-*.parquet");
  job.mutable_data()->set_eval_path(kShards + "plain/data/test-00000-of-00001.parquet");
  job.mutable_data()->mutable_columns()->set_prompt("question");
  job.mutable_eval()->set_num_prompts(8);
  const auto steps = RunShortened("plain", job);
  ASSERT_EQ(steps.size(), 2u);
  for (const auto& [step, record] : steps) EXPECT_EQ(record["samples_generated"], 16) << step;
}

TEST(ParquetJobTest, TrainsOnChatColumnShards) {
  v1::JobConfig job = testing_util::OnQwen2Arith(testing_util::TinyJob());
  job.mutable_data()->set_train_path(kShards + "chat/data/train-*.parquet");
  job.mutable_data()->set_eval_path(kShards + "chat/data/test-00000-of-00001.parquet");
  job.mutable_data()->mutable_columns()->set_messages("conversations");
  job.mutable_eval()->set_num_prompts(8);
  ASSERT_TRUE(loop::PrepareJob(&job).ok());  // the shape from config.json, written once
  const auto steps = RunShortened("chat", job);
  ASSERT_EQ(steps.size(), 2u);
  for (const auto& [step, record] : steps) EXPECT_EQ(record["samples_generated"], 16) << step;
}

}  // namespace
}  // namespace trellis
