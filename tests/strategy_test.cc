// The memory strategies (job.memory, grpo.micro_batch_size) on a tiny job,
// each against the same baseline: every strategy must move the ledger
// object it is meant to move, and no other one the wrong way (DESIGN.md §5,
// issue 4 done-when 4), and `trellis compare` on the baseline and the
// checkpointing run prints the table and verdict and writes its Markdown
// into the baseline's directory (done-when 5).

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/job_config.h"
#include "gtest/gtest.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using testing_util::JobRun;
using testing_util::RunTinyJob;
using testing_util::Slurp;
using testing_util::TinyJob;

// The tiny job with three layers (so that per-layer checkpointing has
// layers to save) and one micro-batch of all 16 samples per update.
v1::JobConfig BaseJob() {
  v1::JobConfig job = TinyJob();
  job.mutable_model()->set_n_layers(3);
  job.mutable_grpo()->set_micro_batch_size(16);
  // Enough warm-up on one-digit sums that the sampled groups have mixed
  // rewards, so that the RL steps update.
  job.mutable_data()->mutable_arithmetic()->set_max_digits(1);
  job.mutable_sft()->set_steps(30);
  job.mutable_grpo()->set_steps(2);
  return job;
}

// The largest size the ledger saw of each learner-0 object (0 if never).
std::map<std::string, int64_t> LearnerObjects(const JobRun& run) {
  std::map<std::string, int64_t> out;
  for (const char* object : {"parameters", "gradients", "optimizer_state", "activations",
                             "master_weights", "adapters", "workspace"}) {
    const nlohmann::json& lifetimes = run.summary["memory"]["lifetimes"];
    const std::string key = std::string("learner-0/") + object;
    out[object] = lifetimes.contains(key) ? lifetimes[key]["largest_bytes"].get<int64_t>() : 0;
  }
  return out;
}

double SumOver(const JobRun& run, const char* key) {
  double sum = 0;
  for (const nlohmann::json& step : run.steps) sum += step.value(key, 0.0);
  return sum;
}

std::string Describe(const std::map<std::string, int64_t>& objects) {
  std::string out;
  for (const auto& [name, bytes] : objects) out += name + "=" + std::to_string(bytes) + " ";
  return out;
}

const JobRun& Baseline() {
  static const JobRun* run = new JobRun(RunTinyJob("strategy_base", BaseJob()));
  return *run;
}

TEST(StrategyTest, CheckpointingTradesActivationsForRecomputeTime) {
  v1::JobConfig job = BaseJob();
  job.mutable_memory()->set_activation_checkpointing(true);
  const JobRun ckpt = RunTinyJob("strategy_ckpt", job);
  const auto base = LearnerObjects(Baseline());
  const auto cand = LearnerObjects(ckpt);
  SCOPED_TRACE("baseline " + Describe(base) + "\ncheckpointing " + Describe(cand));
  EXPECT_LT(cand.at("activations"), 0.7 * base.at("activations"));
  for (const char* same : {"parameters", "gradients", "optimizer_state"}) {
    EXPECT_EQ(cand.at(same), base.at(same)) << same;
  }
  EXPECT_GT(SumOver(ckpt, "recompute_seconds"), 0);
  EXPECT_EQ(SumOver(Baseline(), "recompute_seconds"), 0);
  // Recomputing runs the same operations: the same training, step by step.
  ASSERT_EQ(ckpt.steps.size(), Baseline().steps.size());
  for (size_t i = 0; i < ckpt.steps.size(); ++i) {
    EXPECT_NEAR(ckpt.steps[i]["loss"].get<double>(), Baseline().steps[i]["loss"].get<double>(),
                1e-5)
        << "step " << i;
    EXPECT_EQ(ckpt.steps[i]["mean_reward"], Baseline().steps[i]["mean_reward"]) << "step " << i;
  }
}

TEST(StrategyTest, AccumulationLowersActivationsButNotGradientsOrOptimizerState) {
  v1::JobConfig job = BaseJob();
  job.mutable_grpo()->set_micro_batch_size(4);
  const JobRun accum = RunTinyJob("strategy_accum", job);
  const auto base = LearnerObjects(Baseline());
  const auto cand = LearnerObjects(accum);
  SCOPED_TRACE("baseline " + Describe(base) + "\naccumulation " + Describe(cand));
  EXPECT_LT(cand.at("activations"), 0.7 * base.at("activations"));
  for (const char* same : {"parameters", "gradients", "optimizer_state"}) {
    EXPECT_EQ(cand.at(same), base.at(same)) << same;
  }
  // Token-mean loss over the whole batch: four micro-batches accumulate to
  // the full batch's gradient, so the first update is the same.
  EXPECT_NEAR(accum.steps[0]["loss"].get<double>(), Baseline().steps[0]["loss"].get<double>(),
              1e-5);
  EXPECT_NEAR(accum.steps[0]["grad_norm"].get<double>(),
              Baseline().steps[0]["grad_norm"].get<double>(), 1e-4);
}

TEST(StrategyTest, Bf16HalvesWeightsAndActivationsAndKeepsFp32Masters) {
  v1::JobConfig job = BaseJob();
  job.mutable_memory()->set_precision(v1::MemoryConfig::BF16);
  const JobRun bf16 = RunTinyJob("strategy_bf16", job);
  const auto base = LearnerObjects(Baseline());
  const auto cand = LearnerObjects(bf16);
  SCOPED_TRACE("baseline " + Describe(base) + "\nbf16 " + Describe(cand));
  EXPECT_EQ(cand.at("parameters"), base.at("parameters") / 2);
  EXPECT_EQ(cand.at("master_weights"), base.at("parameters"));
  EXPECT_EQ(base.at("master_weights"), 0);
  // The update runs in fp32 on the masters: fp32 gradients and state. At
  // the peak the model's bf16 gradients are alive too, until they are
  // copied up: half as much again.
  EXPECT_EQ(cand.at("gradients"), base.at("gradients") * 3 / 2);
  EXPECT_EQ(cand.at("optimizer_state"), base.at("optimizer_state"));
  EXPECT_LT(cand.at("activations"), 0.8 * base.at("activations"));
  // Low precision trades accuracy: the first loss is close, not equal.
  const double loss = Baseline().steps[0]["loss"].get<double>();
  EXPECT_NEAR(bf16.steps[0]["loss"].get<double>(), loss, 0.05 * std::abs(loss) + 1e-3);
}

// LoRA through a whole embedded run (learner, actor, reference): the
// frozen base is the parameters object, gradients and optimizer state are
// the adapters' size, and each weight sync moves only the adapters (and the
// base's 8-byte fingerprint).
TEST(StrategyTest, LoraShrinksGradientsOptimizerStateAndWeightSyncToTheAdapters) {
  v1::JobConfig job = BaseJob();
  job.mutable_memory()->mutable_lora()->set_rank(4);
  const JobRun lora = RunTinyJob("strategy_lora", job);
  const auto base = LearnerObjects(Baseline());
  const auto cand = LearnerObjects(lora);
  SCOPED_TRACE("baseline " + Describe(base) + "\nlora " + Describe(cand));
  EXPECT_EQ(cand.at("parameters"), base.at("parameters"));
  EXPECT_EQ(base.at("adapters"), 0);
  EXPECT_GT(cand.at("adapters"), 0);
  EXPECT_EQ(cand.at("gradients"), cand.at("adapters"));
  // The SFT and RL phases' AdamW moments, two each, all resident.
  EXPECT_EQ(cand.at("optimizer_state"), 4 * cand.at("adapters"));
  EXPECT_EQ(base.at("optimizer_state"), 4 * base.at("parameters"));
  EXPECT_LT(10 * cand.at("gradients"), base.at("gradients"));
  // Frozen projections keep no inputs for weight gradients.
  EXPECT_LE(cand.at("activations"), base.at("activations"));
  ASSERT_EQ(lora.steps.size(), Baseline().steps.size());
  for (size_t i = 0; i < lora.steps.size(); ++i) {
    EXPECT_EQ(lora.steps[i]["handoff_bytes"].get<int64_t>(), cand.at("adapters") + 8)
        << "step " << i;
    EXPECT_EQ(Baseline().steps[i]["handoff_bytes"].get<int64_t>(), base.at("parameters"))
        << "step " << i;
  }
}

#ifdef TRELLIS_BINARY
// Runs `trellis ARGS...` to completion; returns its output, failing the
// test when it does not exit 0.
std::string Trellis(const std::vector<std::string>& args, const std::string& name) {
  const fs::path log = fs::path(::testing::TempDir()) / (name + ".log");
  const int status = testing_util::Wait(testing_util::StartTrellis(args, log));
  const std::string out = Slurp(log);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  return out;
}

// The candidate is run as a user would: the baseline's job file and the
// example override of examples/memory/.
TEST(StrategyTest, CompareOfBaselineAndCheckpointingWritesTableVerdictAndMarkdown) {
  const fs::path job_file = fs::path(::testing::TempDir()) / "strategy_base.yaml";
  testing_util::WriteText(job_file, config::ResolvedJobYaml(BaseJob()));
  const fs::path ckpt = fs::path(::testing::TempDir()) / "strategy_compare_ckpt";
  fs::remove_all(ckpt);
  Trellis({"run", job_file.string(), "--override",
           std::string(TRELLIS_SOURCE_DIR) + "/examples/memory/checkpointing.yaml", "--out",
           ckpt.string()},
          "strategy_run_ckpt");
  fs::remove(Baseline().dir / "compare.md");
  const std::string out = Trellis(
      {"compare", Baseline().dir.string(), ckpt.string(), "--budget", "100"}, "strategy_compare");
  for (const char* expected : {"resident at peak", "recompute (in update)", "verdict",
                               "memory.activation_checkpointing"}) {
    EXPECT_NE(out.find(expected), std::string::npos) << expected << " missing from:\n" << out;
  }
  const std::string md = Slurp(Baseline().dir / "compare.md");
  EXPECT_NE(md.find("## Verdict"), std::string::npos) << md;
  EXPECT_NE(md.find("recompute (in update)"), std::string::npos) << md;
}
#endif

}  // namespace
}  // namespace trellis
