// End-to-end with the fake Env: the disk fills during an embedded run. The
// run stops with an error naming the file it could not write, ledger.jsonl
// ends with its last whole record, and the newest checkpoint resumes (once
// there is space again) to the same per-step rewards and bit-identical
// final weights as a run that never ran out of space. Launched runs: the
// scheduler's ledger takes the workers' records (ReportLedger) whole or not
// at all and refuses them, naming ledger.jsonl, once the disk is full.

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
#include "ledger/ledger.h"
#include "run/embedded_job.h"
#include "scheduler/scheduler_service.h"
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

// Every line of `text` a whole JSON record, the last one ended.
void ExpectWholeLines(const std::string& text) {
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << line;
  }
}

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
  ExpectWholeLines(Slurp(run.Ledger()));
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

TEST(FullDiskTest, TheSchedulerRefusesWorkerRecordsItCannotWriteNamingTheLedger) {
  const fs::path dir = fs::path(::testing::TempDir()) / "full_disk_scheduler";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const env::RunDir run(dir.string());
  FakeEnv disk;
  ledger::Ledger ledger(&disk);
  ASSERT_TRUE(ledger.Open(run.Ledger()).ok());
  scheduler::SchedulerService service(absl::Seconds(1), &disk);
  service.AttachLedger(&ledger);

  v1::LedgerReport report;
  report.set_worker_id("learner-0");
  for (int64_t bytes : {1000, 2000, 3000}) {
    v1::ObjectRecord* o = report.add_records()->mutable_object();
    o->set_object("parameters");
    o->set_stage("update");
    o->set_bytes(bytes);
  }
  v1::Empty empty;
  const int64_t opened = disk.bytes_written();
  ASSERT_TRUE(service.ReportLedger(nullptr, &report, &empty).ok());
  const int64_t one_report = disk.bytes_written() - opened;
  ASSERT_GT(one_report, 0);
  // Room for one more report and half a record of the next.
  disk.SetDiskBudget(one_report + one_report / 6);
  ASSERT_TRUE(service.ReportLedger(nullptr, &report, &empty).ok());
  const grpc::Status refused = service.ReportLedger(nullptr, &report, &empty);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr(run.Ledger()));
  EXPECT_EQ(ledger.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(ledger.status().message(), HasSubstr("No space left on device"));
  // Later reports are refused too, and nothing more is written.
  const int64_t written = disk.bytes_written();
  EXPECT_FALSE(service.ReportLedger(nullptr, &report, &empty).ok());
  EXPECT_EQ(disk.bytes_written(), written);
  service.AttachLedger(nullptr);

  const std::string text = Slurp(run.Ledger());
  ExpectWholeLines(text);
  EXPECT_EQ(static_cast<int64_t>(text.size()), written);
}

}  // namespace
}  // namespace trellis
