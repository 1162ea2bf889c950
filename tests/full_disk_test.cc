// End-to-end with the fake Env: the disk fills during an embedded run. The
// run stops with an error naming the file it could not write, ledger.jsonl
// ends with its last whole record, and the newest checkpoint resumes (once
// there is space again) to the same per-step rewards and bit-identical
// final weights as a run that never ran out of space.

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "env/env.h"
#include "env/run_dir.h"
#include "env/testing/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "run/embedded_job.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using env::testing::FakeEnv;
using ::testing::HasSubstr;
using testing_util::Slurp;
using testing_util::StepRewards;

constexpr int kSteps = 6;
constexpr int kCheckpointEvery = 2;
// What the disk holds after the step-2 checkpoint: less than a step's records.
constexpr int64_t kBytesLeft = 600;

v1::JobConfig Job() {
  v1::JobConfig job = testing_util::TinyJob();
  job.mutable_grpo()->set_steps(kSteps);
  job.mutable_runtime()->set_checkpoint_every(kCheckpointEvery);
  return job;
}

// The fake disk fills once `latest` names the step-2 checkpoint.
class FillAfterFirstCheckpoint final : public env::EnvWrapper {
 public:
  explicit FillAfterFirstCheckpoint(FakeEnv* disk) : EnvWrapper(disk), disk_(disk) {}

  absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) override {
    absl::Status s = EnvWrapper::WriteFileAtomically(path, contents);
    if (s.ok() && absl::EndsWith(path, "/checkpoints/latest")) {
      disk_->SetDiskBudget(kBytesLeft);
    }
    return s;
  }

 private:
  FakeEnv* const disk_;
};

TEST(FullDiskTest, StopsWithThePathLeavesNoTornLineAndResumes) {
  const fs::path root = fs::path(::testing::TempDir()) / "full_disk_test";
  fs::remove_all(root);
  const fs::path straight = root / "straight";
  const fs::path full = root / "full";
  std::ostringstream progress;
  ASSERT_TRUE(run::RunEmbeddedJob(Job(), straight.string(), progress).ok())
      << progress.str();

  FakeEnv disk;
  FillAfterFirstCheckpoint env(&disk);
  const env::RunDir run(full.string());
  absl::Status s = run::RunEmbeddedJob(Job(), full.string(), progress, nullptr, &env);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr(run.Ledger()));
  EXPECT_THAT(s.message(), HasSubstr("No space left on device"));
  EXPECT_THAT(s.message(), HasSubstr("the run stopped: cancelled before step 3"));
  EXPECT_FALSE(fs::exists(run.Policy()));
  EXPECT_FALSE(fs::exists(run.Summary()));

  // Every line whole: the last record before the disk filled ends the file.
  const std::string ledger = Slurp(run.Ledger());
  ASSERT_FALSE(ledger.empty());
  EXPECT_EQ(ledger.back(), '\n');
  std::istringstream lines(ledger);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << line;
  }
  EXPECT_EQ(Slurp(run.LatestCheckpoint()), "step_2\n");

  // Space again: the resumed run ends as the straight one did.
  ASSERT_TRUE(run::ResumeEmbeddedJob(full.string(), progress).ok()) << progress.str();
  const std::map<int64_t, double> want = StepRewards(straight);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(StepRewards(full), want);
  const std::string weights = Slurp(straight / env::RunDir::kPolicy);
  ASSERT_FALSE(weights.empty());
  EXPECT_TRUE(weights == Slurp(run.Policy())) << "final weights differ";
}

}  // namespace
}  // namespace trellis
