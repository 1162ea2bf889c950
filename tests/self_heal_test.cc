// `trellis launch` heals itself: a stopped (SIGSTOP) learner is waited
// for, a killed scheduler, learner, reference or verifier is restarted
// from the newest checkpoint, and under random kills and stops of any role
// the job completes with every step trained once on a full batch.
//  - Stop or kill with one actor: per-step rewards and final weights equal
//    the embedded run's exactly (a restart resumes bit-exactly).
//  - Chaos with two actors: nothing lost or counted twice.
// Kills and stops are placed by the run's progress (step records), not by
// the clock.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/launch_util.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::ExitedOk;
using testing_util::ExpectNoneLeft;
using testing_util::Processes;
using testing_util::Slurp;
using testing_util::StartTrellis;
using testing_util::StepRecords;
using testing_util::StepRewards;
using testing_util::Wait;
using testing_util::WaitFor;
using testing_util::WriteText;

constexpr int kSteps = 16;

v1::JobConfig Job(int actors, int steps) {
  v1::JobConfig job = testing_util::VaryingRewardsJob(steps);
  job.mutable_runtime()->set_checkpoint_every(2);
  auto* d = job.mutable_deployment();
  d->mutable_actor()->set_count(actors);
  d->set_heartbeat_interval_ms(200);
  d->set_heartbeat_timeout_ms(2000);
  d->set_stall_timeout_ms(40000);
  return job;
}

// One embedded run of Job(1, kSteps), the launched runs' yardstick.
class SelfHealTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::path(::testing::TempDir()) / ("self_heal_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    WriteText(root_ / "job.yaml", config::ResolvedJobYaml(Job(1, kSteps)));
    embedded_ok_ = ExitedOk(Wait(StartTrellis(
        {"run", (root_ / "job.yaml").string(), "--out", (root_ / "embedded").string()},
        root_ / "embedded.log")));
  }

  void SetUp() override { ASSERT_TRUE(embedded_ok_) << Slurp(root_ / "embedded.log"); }

  // Launches job.yaml into root/NAME; returns the launcher's pid.
  static pid_t Launch(const std::string& name) {
    return StartTrellis(
        {"launch", (root_ / "job.yaml").string(), "--out", (root_ / name).string()},
        root_ / (name + ".log"));
  }

  static void ExpectEqualsEmbedded(const std::string& name) {
    const std::map<int64_t, double> want = StepRewards(root_ / "embedded");
    ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(StepRewards(root_ / name), want);
    const std::string weights = Slurp(root_ / "embedded" / "policy.safetensors");
    ASSERT_FALSE(weights.empty());
    EXPECT_TRUE(weights == Slurp(root_ / name / "policy.safetensors")) << "final weights differ";
  }

  static inline fs::path root_;
  static inline bool embedded_ok_ = false;
};

TEST_F(SelfHealTest, AStoppedLearnerIsWaitedFor) {
  const pid_t launcher = Launch("stopped");
  const fs::path out = root_ / "stopped";
  ASSERT_TRUE(WaitFor([&] { return StepRecords(out).size() >= 2; }, 120))
      << Slurp(root_ / "stopped.log");
  const pid_t learner = Processes(out).at("learner-0");
  ASSERT_EQ(::kill(learner, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::seconds(20));
  ASSERT_EQ(::kill(learner, SIGCONT), 0);
  const int status = Wait(launcher);
  const std::string log = Slurp(root_ / "stopped.log");
  ASSERT_TRUE(ExitedOk(status)) << log;
  EXPECT_THAT(log, HasSubstr("learner-0 stalled (no heartbeat for 2s); waiting for it up to 40s"));
  EXPECT_THAT(log, HasSubstr("learner-0 is heartbeating again"));
  EXPECT_THAT(log, Not(HasSubstr("declared dead")));
  EXPECT_THAT(log, Not(HasSubstr("[launch] restart")));
  ExpectEqualsEmbedded("stopped");
  ExpectNoneLeft(Processes(out));
}

// SIGKILL of the role named by the parameter after the step-4 checkpoint
// (or a later one).
class KilledRoleTest : public SelfHealTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(KilledRoleTest, IsRestartedFromTheNewestCheckpoint) {
  const std::string name = "killed_" + GetParam();
  const fs::path out = root_ / name;
  const pid_t launcher = Launch(name);
  // The newest checkpoint is step_4 or a later one (the poll may miss one).
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string latest = Slurp(out / "checkpoints" / "latest");
        return latest.size() > 5 && std::stoi(latest.substr(5)) >= 4;
      },
      120))
      << Slurp(root_ / (name + ".log"));
  ASSERT_EQ(::kill(Processes(out).at(GetParam()), SIGKILL), 0);
  const int status = Wait(launcher);
  const std::string log = Slurp(root_ / (name + ".log"));
  ASSERT_TRUE(ExitedOk(status)) << log;
  EXPECT_THAT(log, HasSubstr("[launch] restart 1 of 3: "));
  EXPECT_THAT(log, HasSubstr("; going on from " + (out / "checkpoints" / "step_").string()));
  EXPECT_THAT(log, HasSubstr("resuming from"));
  const std::string restarts = Slurp(out / "launch" / "restarts.tsv");
  EXPECT_THAT(restarts, HasSubstr("attempt\tcause\tresumed_from\n1\t"));
  EXPECT_EQ(std::count(restarts.begin(), restarts.end(), '\n'), 2) << restarts;
  ExpectEqualsEmbedded(name);
  ExpectNoneLeft(Processes(out));
}

INSTANTIATE_TEST_SUITE_P(Roles, KilledRoleTest,
                         ::testing::Values("scheduler", "learner-0", "reference-0", "verifier-0"),
                         [](const auto& info) {
                           std::string name = info.param;
                           name.erase(std::remove(name.begin(), name.end(), '-'), name.end());
                           return name;
                         });

// Every 25 steps a random role (actors too) is SIGKILLed, or SIGSTOPped
// for 1-4 s; the job completes with each step trained once, on a full
// batch, and nothing counted twice.
TEST_F(SelfHealTest, ChaosLosesAndRepeatsNothing) {
  constexpr int kChaosSteps = 240;
  constexpr int kEvents = 8;
  v1::JobConfig job = Job(2, kChaosSteps);
  job.mutable_runtime()->set_checkpoint_every(5);
  job.mutable_deployment()->set_stall_timeout_ms(10000);
  job.mutable_deployment()->set_max_restarts(kEvents);
  WriteText(root_ / "chaos.yaml", config::ResolvedJobYaml(job));
  const fs::path out = root_ / "chaos";
  const pid_t launcher = StartTrellis(
      {"launch", (root_ / "chaos.yaml").string(), "--out", out.string()}, root_ / "chaos.log");

  std::mt19937 rng(18);
  const std::vector<std::string> roles = {"scheduler",  "learner-0", "reference-0",
                                          "verifier-0", "actor-0",   "actor-1"};
  int kills = 0, stops = 0;
  for (int event = 0; event < kEvents; ++event) {
    const size_t at_step = 15 + 25 * event;
    ASSERT_TRUE(WaitFor([&] { return StepRecords(out).size() >= at_step; }, 180))
        << "event " << event << ": step " << at_step << " not reached\n"
        << Slurp(root_ / "chaos.log");
    const std::map<std::string, pid_t> pids = Processes(out);
    const std::string role = roles[rng() % roles.size()];
    ASSERT_EQ(pids.count(role), 1u) << role;
    if (rng() % 2 == 0) {
      ::kill(pids.at(role), SIGKILL);
      ++kills;
    } else {
      ::kill(pids.at(role), SIGSTOP);
      std::this_thread::sleep_for(std::chrono::milliseconds(1000 + rng() % 3000));
      ::kill(pids.at(role), SIGCONT);
      ++stops;
    }
  }
  const int status = Wait(launcher);
  const std::string log = Slurp(root_ / "chaos.log");
  ASSERT_TRUE(ExitedOk(status)) << log;
  EXPECT_GT(kills, 0);
  EXPECT_GT(stops, 0);

  const std::map<int64_t, nlohmann::json> steps = StepRecords(out);
  ASSERT_EQ(steps.size(), static_cast<size_t>(kChaosSteps)) << log;
  EXPECT_EQ(steps.begin()->first, 0);
  EXPECT_EQ(steps.rbegin()->first, kChaosSteps - 1);
  const int64_t prompts = job.grpo().prompts_per_step();
  const int64_t full = prompts * job.grpo().responses_per_prompt();
  for (const auto& [step, record] : steps) {
    EXPECT_EQ(record["prompts"].get<int64_t>(), prompts) << "step " << step;
    EXPECT_EQ(record["samples_generated"].get<int64_t>(), full) << "step " << step;
    EXPECT_EQ(record.value("samples_dropped", int64_t{0}), 0) << "step " << step;
  }
  const nlohmann::json summary = nlohmann::json::parse(Slurp(out / "summary.json"));
  EXPECT_EQ(summary["steps"].get<int64_t>(), kChaosSteps);
  EXPECT_EQ(summary["samples"]["generated"].get<int64_t>(), kChaosSteps * full);
  ExpectNoneLeft(Processes(out));
}

}  // namespace
}  // namespace trellis
