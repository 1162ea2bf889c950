// End-to-end: the embedded GRPO job on a tiny configuration.

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "config/job_config.h"
#include "gtest/gtest.h"
#include "run/embedded_job.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

using testing_util::Slurp;
using testing_util::TinyJob;

fs::path RunTiny(const std::string& name, const v1::JobConfig& job) {
  const fs::path dir = fs::path(testing::TempDir()) / name;
  fs::remove_all(dir);
  std::ostringstream progress;
  absl::Status status = run::RunEmbeddedJob(job, dir.string(), progress);
  EXPECT_TRUE(status.ok()) << status << "\n" << progress.str();
  return dir;
}

std::vector<double> StepRewards(const fs::path& dir) {
  std::vector<double> rewards;
  std::ifstream in(dir / "ledger.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line);
    if (record["type"] == "step") rewards.push_back(record["mean_reward"].get<double>());
  }
  return rewards;
}

TEST(EmbeddedJobTest, WritesSummaryLedgerAndResolvedJob) {
  const fs::path dir = RunTiny("summary", TinyJob());
  const auto summary = nlohmann::json::parse(Slurp(dir / "summary.json"));
  EXPECT_TRUE(summary.contains("eval"));
  EXPECT_TRUE(summary["eval"]["before"].contains("accuracy"));
  EXPECT_TRUE(summary["eval"]["after"].contains("accuracy"));
  EXPECT_EQ(summary["steps"].get<int>(), 3);
  for (const char* stage : {"rollout", "verify", "reference", "update", "weight_sync"}) {
    EXPECT_GT(summary["stage_seconds"][stage].get<double>(), 0.0) << stage;
  }
  for (const char* key : {"rollout_update_ratio", "verifier_wait_seconds",
                          "effective_sample_rate"}) {
    EXPECT_TRUE(summary.contains(key)) << key;
  }
  EXPECT_GT(summary["memory"]["peak_bytes"].get<int64_t>(), 0);
  for (const char* object : {"parameters", "gradients", "optimizer_state", "activations",
                             "kv_cache"}) {
    EXPECT_GT(summary["memory"]["objects"][object].get<int64_t>(), 0) << object;
  }
  EXPECT_EQ(StepRewards(dir).size(), 3u);

  // The machine comes first; each stage that computes records its FLOP, and
  // the run's totals are the steps' (SFT runs before the first step).
  std::ifstream ledger(dir / "ledger.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(ledger, line));
  const auto machine = nlohmann::json::parse(line);
  EXPECT_EQ(machine["type"], "machine");
  EXPECT_EQ(machine["intra_op_threads"], 1);
  EXPECT_EQ(machine["threads_given"], 1);
  EXPECT_TRUE(machine["thread_probe_seconds"].empty());
  EXPECT_GT(machine["matmul_peak_gflops_per_second"].get<double>(), 0);
  double step_update_flops = 0;
  while (std::getline(ledger, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record["type"] == "step") {
      step_update_flops += record["compute"]["stages"]["update"]["flops"].get<double>();
    }
  }
  const auto& compute = summary["compute"];
  EXPECT_DOUBLE_EQ(compute["matmul_peak_gflops_per_second"].get<double>(),
                   machine["matmul_peak_gflops_per_second"].get<double>());
  for (const char* stage : {"sft", "rollout", "eval", "reference", "update"}) {
    EXPECT_GT(compute["stages"][stage]["flops"].get<double>(), 0) << stage;
    EXPECT_GT(compute["stages"][stage]["peak_fraction"].get<double>(), 0) << stage;
  }
  EXPECT_DOUBLE_EQ(compute["stages"]["update"]["flops"].get<double>(), step_update_flops);

  // The resolved job repeats the run: it parses back to the same job.
  absl::StatusOr<v1::JobConfig> resolved = config::LoadJobFile((dir / "job.yaml").string());
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->grpo().steps(), 3);
  EXPECT_EQ(resolved->model().d_model(), 32);
  EXPECT_EQ(resolved->runtime().out_dir(), dir.string());
}

// Same seed and config on one thread: identical rewards, bit-identical weights.
TEST(EmbeddedJobTest, SameSeedGivesIdenticalRun) {
  const fs::path a = RunTiny("det_a", TinyJob());
  const fs::path b = RunTiny("det_b", TinyJob());
  const std::vector<double> ra = StepRewards(a), rb = StepRewards(b);
  ASSERT_EQ(ra.size(), 3u);
  EXPECT_EQ(ra, rb);
  const std::string wa = Slurp(a / "policy.safetensors");
  ASSERT_FALSE(wa.empty());
  EXPECT_TRUE(wa == Slurp(b / "policy.safetensors")) << "final weights differ";

  v1::JobConfig other = TinyJob();
  other.mutable_runtime()->set_seed(6);
  const fs::path c = RunTiny("det_c", other);
  EXPECT_FALSE(wa == Slurp(c / "policy.safetensors"));
}

// sampling.decode_token_budget reaches the rollout engine: the decode
// batch holds at most that many rows, so the actor's KV cache peaks lower,
// and the samples do not change (the first step's, drawn before any update
// could differ by float noise in the behaviour log-probs, exactly).
TEST(EmbeddedJobTest, DecodeTokenBudgetBoundsTheKvCacheNotTheSamples) {
  const fs::path whole = RunTiny("budget_none", TinyJob());
  v1::JobConfig job = TinyJob();
  job.mutable_sampling()->set_decode_token_budget(2);
  const fs::path budget = RunTiny("budget_2", job);
  const auto kv = [](const fs::path& dir) {
    return nlohmann::json::parse(Slurp(dir / "summary.json"))["memory"]["objects"]["kv_cache"]
        .get<int64_t>();
  };
  EXPECT_GT(kv(budget), 0);
  EXPECT_LT(kv(budget), kv(whole));
  const std::vector<double> rewards = StepRewards(budget);
  ASSERT_FALSE(rewards.empty());
  EXPECT_EQ(rewards.front(), StepRewards(whole).front());
}

TEST(EmbeddedJobTest, InvalidJobIsRefusedBeforeAnythingRuns) {
  v1::JobConfig job = TinyJob();
  job.mutable_grpo()->set_responses_per_prompt(1);
  const fs::path dir = fs::path(testing::TempDir()) / "invalid";
  fs::remove_all(dir);
  std::ostringstream progress;
  absl::Status status = run::RunEmbeddedJob(job, dir.string(), progress);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("grpo.responses_per_prompt"), std::string::npos) << status;
  EXPECT_FALSE(fs::exists(dir / "ledger.jsonl"));
}

}  // namespace
}  // namespace trellis
