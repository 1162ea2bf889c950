#include "observe/run_metrics.h"

#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "env/run_dir.h"
#include "env/testing/fake_env.h"
#include "gtest/gtest.h"

namespace trellis::observe {
namespace {

namespace fs = std::filesystem;
using env::testing::FakeEnv;

// A sink that keeps what it is given.
struct Kept {
  std::vector<MetricPoint> points;
  std::vector<MetricPoint> summaries;
  std::vector<bool> succeeded;
};

class KeepingSink final : public MetricSink {
 public:
  explicit KeepingSink(Kept* kept) : kept_(kept) {}
  void Write(const MetricPoint& point) override { kept_->points.push_back(point); }
  void Finish(const MetricPoint& summary, bool succeeded) override {
    kept_->summaries.push_back(summary);
    kept_->succeeded.push_back(succeeded);
  }

 private:
  Kept* const kept_;
};

std::map<std::string, double> ByTag(const MetricPoint& point) {
  std::map<std::string, double> tags;
  for (const ledger::Scalar& s : point.scalars) tags[s.tag] = s.value;
  return tags;
}

class RunMetricsTest : public ::testing::Test {
 protected:
  std::unique_ptr<RunMetrics> Metrics() {
    std::vector<std::unique_ptr<MetricSink>> sinks;
    sinks.push_back(std::make_unique<KeepingSink>(&a_));
    sinks.push_back(std::make_unique<KeepingSink>(&b_));
    return std::make_unique<RunMetrics>(std::move(sinks), &ledger_, &env_);
  }

  void Step(int64_t step) {
    ledger_.BeginStep(step);
    ledger::StepCounts counts;
    counts.step = step;
    counts.mean_reward = 0.5 * step;
    ledger_.EndStep(counts);
  }

  FakeEnv env_;
  ledger::Ledger ledger_{&env_};
  Kept a_, b_;
};

TEST_F(RunMetricsTest, EverySinkGetsEveryStepAndEvalThenTheSummary) {
  const fs::path dir = fs::path(::testing::TempDir()) / "run_metrics_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string summary = (dir / "summary.json").string();
  ASSERT_TRUE(
      env_.WriteFileAtomically(summary, R"({"steps": 2, "stage_seconds": {"update": 1.5}})").ok());
  std::unique_ptr<RunMetrics> metrics = Metrics();
  ledger_.RecordEval("before", {});
  Step(0);
  env_.Advance(absl::Seconds(5));
  Step(1);
  metrics->Finish(/*succeeded=*/true, summary);
  Step(2);  // After Finish: detached.

  for (const Kept* kept : {&a_, &b_}) {
    ASSERT_EQ(kept->points.size(), 3u);
    EXPECT_EQ(kept->points[0].step, 0);
    EXPECT_TRUE(ByTag(kept->points[0]).contains("eval/accuracy"));
    EXPECT_EQ(kept->points[2].step, 1);
    EXPECT_EQ(ByTag(kept->points[2]).at("mean_reward"), 0.5);
    EXPECT_EQ(kept->points[2].time, absl::FromUnixSeconds(FakeEnv::kStartUnixSeconds + 5));
    ASSERT_EQ(kept->summaries.size(), 1u);
    EXPECT_EQ(kept->summaries[0].step, 1);
    EXPECT_EQ(ByTag(kept->summaries[0]),
              (std::map<std::string, double>{{"summary/stage_seconds/update", 1.5},
                                             {"summary/steps", 2}}));
    EXPECT_EQ(kept->succeeded, std::vector<bool>{true});
  }
}

TEST_F(RunMetricsTest, ARunThatEndsWithoutFinishFailsItsSinksOnce) {
  {
    std::unique_ptr<RunMetrics> metrics = Metrics();
    Step(0);
  }
  ASSERT_EQ(a_.summaries.size(), 1u);
  EXPECT_TRUE(a_.summaries[0].scalars.empty());
  EXPECT_EQ(a_.succeeded, std::vector<bool>{false});
}

// The job's sinks: a TensorBoard file in RUN/tensorboard/ (and no MLflow
// run without observe.mlflow.uri).
TEST_F(RunMetricsTest, StartWritesTheEventFileInTheRunDirectory) {
  const fs::path dir = fs::path(::testing::TempDir()) / "run_metrics_start";
  fs::remove_all(dir);
  std::ostringstream warnings;
  absl::StatusOr<std::unique_ptr<RunMetrics>> metrics =
      RunMetrics::Start(v1::JobConfig(), dir.string(), -1, &ledger_, &env_, &warnings);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  Step(0);
  (*metrics)->Finish(/*succeeded=*/false);
  const fs::path tensorboard = dir / env::RunDir::kTensorBoard;
  ASSERT_TRUE(fs::is_directory(tensorboard));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(tensorboard)) {
    EXPECT_EQ(entry.path().filename().string().rfind("events.out.tfevents.", 0), 0u);
    EXPECT_GT(fs::file_size(entry.path()), 0u);
    ++files;
  }
  EXPECT_EQ(files, 1);
  EXPECT_EQ(warnings.str(), "");
}

}  // namespace
}  // namespace trellis::observe
