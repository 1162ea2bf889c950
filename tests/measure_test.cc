// The measuring tools end to end on tiny jobs: memory attribution of every
// role's peak, the planner against measured peaks, pressure probes, and the
// strategy comparison.

#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "tools/planner.h"
#include "tools/compare.h"
#include "run/embedded_job.h"
#include "tools/plan_job.h"
#include "tools/probe.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing_util::Slurp;
using testing_util::TinyJob;

fs::path TempDir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("measure_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

json RunAndSummarize(const v1::JobConfig& job, const fs::path& dir) {
  std::ostringstream progress;
  const absl::Status s = run::RunEmbeddedJob(job, dir.string(), progress);
  EXPECT_TRUE(s.ok()) << s << "\n" << progress.str();
  return json::parse(Slurp(dir / "summary.json"));
}

// Checks that every role's peak is explained by its objects but for at most
// `fraction` of it, and returns the run's peak.
int64_t ExpectAttributed(const json& summary, double fraction) {
  const json& roles = summary.at("memory").at("role_peaks");
  EXPECT_FALSE(roles.empty());
  for (const auto& [role, peak] : roles.items()) {
    const double measured = peak.at("measured_bytes").get<double>();
    const double unattributed = peak.at("unattributed_bytes").get<double>();
    EXPECT_LE(std::abs(unattributed), fraction * measured)
        << role << ": " << unattributed << " of " << measured << " bytes unattributed\n"
        << peak.dump(2);
  }
  return summary.at("memory").at("peak_bytes").get<int64_t>();
}

TEST(MeasureTest, PlanIsWithinTenPercentOfTheMeasuredPeak) {
  const std::vector<v1::JobConfig> jobs = testing_util::PlannerJobs(TinyJob());
  for (size_t i = 0; i < jobs.size(); ++i) {
    SCOPED_TRACE("configuration " + std::to_string(i));
    const json summary = RunAndSummarize(jobs[i], TempDir("plan" + std::to_string(i)));
    const int64_t measured = ExpectAttributed(summary, 0.05);
    absl::StatusOr<tools::Plan> plan = tools::PlanJob(jobs[i]);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::ostringstream printed;
    tools::PrintPlan(*plan, printed);
    EXPECT_NEAR(static_cast<double>(plan->peak_bytes), static_cast<double>(measured),
                0.10 * measured)
        << printed.str() << "\nmeasured:\n"
        << summary.at("memory").dump(2);
    // Every line carries its formula.
    for (const tools::PlanLine& line : plan->resident) EXPECT_FALSE(line.formula.empty());
  }
}

// The first GRPO update after an SFT warm-up creates its optimizer's state
// in its step, after the backward passes' peak: the learner's peak counts
// the state as it was then.
TEST(MeasureTest, TheFirstUpdateOfAPhaseReconciles) {
  v1::JobConfig job = testing_util::VaryingRewardsJob(1);
  job.mutable_sft()->set_steps(2);
  ExpectAttributed(RunAndSummarize(job, TempDir("new_optimizer")), 0.001);
}

TEST(MeasureTest, ProbeOfMicroBatchNamesActivations) {
  tools::ProbeOptions options;
  options.key = "micro_batch";
  options.values = {"1", "2", "4"};
  options.steps = 2;
  options.out_dir = TempDir("probe_micro").string();
  absl::StatusOr<tools::ProbeResult> result = tools::RunProbe(TinyJob(), options);
  ASSERT_TRUE(result.ok()) << result.status();
  std::ostringstream printed;
  tools::PrintProbe(*result, printed);
  EXPECT_EQ(result->pressure_object, "learner-0/activations") << printed.str();
  EXPECT_GT(result->moves[0].delta(), 0) << printed.str();
}

TEST(MeasureTest, ProbeOfOptimizerNamesOptimizerState) {
  tools::ProbeOptions options;
  options.key = "optimizer";
  options.values = {"adamw", "sgd"};
  options.steps = 2;
  options.out_dir = TempDir("probe_optimizer").string();
  absl::StatusOr<tools::ProbeResult> result = tools::RunProbe(TinyJob(), options);
  ASSERT_TRUE(result.ok()) << result.status();
  std::ostringstream printed;
  tools::PrintProbe(*result, printed);
  EXPECT_EQ(result->pressure_object, "learner-0/optimizer_state") << printed.str();
  // SGD without momentum keeps no state at all.
  EXPECT_EQ(result->moves[0].last, 0) << printed.str();
}

TEST(MeasureTest, ProbeOfCheckpointingNamesActivations) {
  v1::JobConfig job = TinyJob();
  job.mutable_model()->set_n_layers(3);
  job.mutable_grpo()->set_micro_batch_size(16);
  tools::ProbeOptions options;
  options.key = "strategy";
  options.values = {"none", "checkpointing"};
  options.steps = 2;
  options.out_dir = TempDir("probe_strategy").string();
  absl::StatusOr<tools::ProbeResult> result = tools::RunProbe(job, options);
  ASSERT_TRUE(result.ok()) << result.status();
  std::ostringstream printed;
  tools::PrintProbe(*result, printed);
  EXPECT_EQ(result->pressure_object, "learner-0/activations") << printed.str();
  EXPECT_LT(result->moves[0].delta(), 0) << printed.str();
}

TEST(MeasureTest, ProbeRefusesAnUnknownKey) {
  v1::JobConfig job = TinyJob();
  const absl::Status s = tools::ApplyProbeSetting("colour", "red", &job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("colour"), std::string::npos) << s;
}

TEST(MeasureTest, CompareWritesTableAndVerdict) {
  const fs::path base = TempDir("compare_base");
  const fs::path cand = TempDir("compare_cand");
  v1::JobConfig job = TinyJob();
  RunAndSummarize(job, base);
  job.mutable_grpo()->set_micro_batch_size(2);  // more accumulation, same workload
  RunAndSummarize(job, cand);

  tools::CompareOptions options;
  options.step_time_budget = 100;  // no timing decides this test
  options.quality_tolerance = 1;
  absl::StatusOr<tools::Comparison> c =
      tools::CompareRuns({base.string(), cand.string()}, options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->verdicts.size(), 1u);
  EXPECT_TRUE(c->verdicts[0].quality_kept);
  EXPECT_EQ(c->verdicts[0].rank, 1);
  ASSERT_EQ(c->runs[1].changes.size(), 1u);
  EXPECT_NE(c->runs[1].changes[0].find("grpo.micro_batch_size"), std::string::npos)
      << c->runs[1].changes[0];
  EXPECT_TRUE(c->runs[1].workload_changes.empty());
  // Smaller micro-batches: less activation memory at the learner's peak.
  EXPECT_GT(c->runs[0].peak.measured_bytes, 0);
  std::ostringstream table;
  tools::PrintComparison(*c, table);
  EXPECT_NE(table.str().find("resident at peak"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("verdict"), std::string::npos) << table.str();
  const std::string md = tools::ComparisonMarkdown(*c);
  EXPECT_NE(md.find("## Verdict"), std::string::npos) << md;
  EXPECT_NE(md.find("| peak source |"), std::string::npos) << md;
}

TEST(MeasureTest, CompareRefusesAMissingRun) {
  const fs::path base = TempDir("compare_missing");
  absl::StatusOr<tools::Comparison> c =
      tools::CompareRuns({base.string(), (base / "nope").string()}, {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound) << c.status();
}

}  // namespace
}  // namespace trellis
