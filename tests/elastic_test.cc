// Actors join and leave a launched job (docs/async.md#actors-that-join-and-leave):
//  - A second actor started with `trellis serve actor --scheduler ADDR`
//    while the job runs works from the next step on; the rewards equal the
//    fixed one-actor run's (sampling is keyed by the sample, so the pool's
//    size does not change the draws). The final weights are not compared:
//    a fixed pool of two already ends with other weight bits than a pool of
//    one (with the same rewards), so more than the draws depends on how the
//    batch is split (the per-shard log-probs, presumably).
//  - An actor sent SIGTERM drains: it finishes its work, leaves, exits 0,
//    and no prompt is lost (the prompt account reconciles at every step).
// Which step the pool changes at is read from the step records (their
// `rollout_actors`), not from the clock. Each test prints the steps'
// rollout seconds by pool size: a measurement, not an assertion.

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <string>

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
using testing_util::Processes;
using testing_util::Slurp;
using testing_util::StartTrellis;
using testing_util::StepRecords;
using testing_util::StepRewards;
using testing_util::Wait;
using testing_util::WaitFor;
using testing_util::WriteText;

constexpr int kSteps = 12;

// Actors join over the grpc transport, which serves any number of them.
v1::JobConfig Job(int actors) {
  v1::JobConfig job = testing_util::VaryingRewardsJob(kSteps);
  auto* d = job.mutable_deployment();
  d->mutable_actor()->set_count(actors);
  d->set_weight_transport("grpc");
  d->set_heartbeat_interval_ms(200);
  d->set_heartbeat_timeout_ms(2000);
  d->set_stall_timeout_ms(40000);
  return job;
}

// The step records that rolled out, by step: how many actors answered.
std::map<int64_t, int64_t> PoolSizes(const fs::path& out) {
  std::map<int64_t, int64_t> sizes;
  for (const auto& [step, record] : StepRecords(out)) {
    const int64_t actors = record.value("rollout_actors", int64_t{0});
    if (actors > 0) sizes[step] = actors;
  }
  return sizes;
}

// The first step whose rollout `actors` actors answered; -1 if none.
int64_t FirstStepWith(const std::map<int64_t, int64_t>& sizes, int64_t actors) {
  for (const auto& [step, n] : sizes) {
    if (n == actors) return step;
  }
  return -1;
}

// Mean rollout seconds of the steps by pool size, printed for the report.
void PrintRolloutSeconds(const fs::path& out, const std::string& what) {
  std::map<int64_t, std::pair<double, int>> by_size;
  for (const auto& [step, record] : StepRecords(out)) {
    const int64_t actors = record.value("rollout_actors", int64_t{0});
    if (actors == 0) continue;
    by_size[actors].first += record["stage_seconds"].value("rollout", 0.0);
    ++by_size[actors].second;
  }
  for (const auto& [actors, total] : by_size) {
    std::cout << what << ": " << actors << " actor(s): " << total.second
              << " steps, mean rollout " << total.first / total.second << " s" << std::endl;
  }
}

void ExpectEveryAccountReconciles(const fs::path& out) {
  const std::map<int64_t, nlohmann::json> steps = StepRecords(out);
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps));
  for (const auto& [step, record] : steps) {
    EXPECT_TRUE(record["prompt_account"]["reconciles"].get<bool>())
        << "step " << step << ": " << record["prompt_account"].dump();
  }
}

// One embedded run of Job(1): a fixed pool that makes the same draws.
class ElasticTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::path(::testing::TempDir()) / ("elastic_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    WriteText(root_ / "one.yaml", config::ResolvedJobYaml(Job(1)));
    WriteText(root_ / "two.yaml", config::ResolvedJobYaml(Job(2)));
    embedded_ok_ = ExitedOk(Wait(StartTrellis(
        {"run", (root_ / "one.yaml").string(), "--out", (root_ / "embedded").string()},
        root_ / "embedded.log")));
  }

  void SetUp() override { ASSERT_TRUE(embedded_ok_) << Slurp(root_ / "embedded.log"); }

  static pid_t Launch(const std::string& yaml, const std::string& name) {
    return StartTrellis({"launch", (root_ / yaml).string(), "--out", (root_ / name).string()},
                        root_ / (name + ".log"));
  }

  // Once the run in root/NAME has 3 step records, stops its learner, calls
  // `change`, waits until root/LOG says `known` (the scheduler knows of the
  // change), and lets the learner go on. Returns how many step records
  // there were meanwhile: the pool changes at the boundary after them, the
  // machine's speed whatever it is. -1 (the test failed) on a timeout.
  static int64_t ChangeWhileTheLearnerWaits(const std::string& name,
                                            const std::function<void()>& change,
                                            const std::string& log, const std::string& known) {
    const fs::path out = root_ / name;
    if (!WaitFor([&] { return StepRecords(out).size() >= 3; }, 120)) {
      ADD_FAILURE() << "no step 3\n" << Slurp(root_ / (name + ".log"));
      return -1;
    }
    const pid_t learner = Processes(out).at("learner-0");
    EXPECT_EQ(::kill(learner, SIGSTOP), 0);
    change();
    const bool seen =
        WaitFor([&] { return Slurp(root_ / log).find(known) != std::string::npos; }, 120);
    const int64_t recorded = static_cast<int64_t>(StepRecords(out).size());
    EXPECT_EQ(::kill(learner, SIGCONT), 0);
    if (!seen) ADD_FAILURE() << "'" << known << "' not in " << log << "\n" << Slurp(root_ / log);
    return seen ? recorded : -1;
  }

  // The run in root/NAME rolled out every step with `before` actors up to
  // the boundary after its first `recorded` steps (not before step 3, when
  // the change was made) and with `after` from then on; its rewards are the
  // fixed pool's and its prompt account reconciles at every step.
  static void ExpectPoolChangedOnce(const std::string& name, int64_t before, int64_t after,
                                    int64_t recorded) {
    const fs::path out = root_ / name;
    const std::map<int64_t, int64_t> sizes = PoolSizes(out);
    ASSERT_EQ(sizes.size(), static_cast<size_t>(kSteps));
    const int64_t changed = FirstStepWith(sizes, after);
    EXPECT_GE(changed, 3) << "the pool changed after step 3";
    EXPECT_LE(changed, recorded + 1) << "it changes at the step boundary after the scheduler knows";
    for (const auto& [step, actors] : sizes) {
      EXPECT_EQ(actors, step < changed ? before : after) << "step " << step;
    }
    EXPECT_EQ(StepRewards(out), StepRewards(root_ / "embedded"));
    ExpectEveryAccountReconciles(out);
    PrintRolloutSeconds(out, name);
  }

  static inline fs::path root_;
  static inline bool embedded_ok_ = false;
};

TEST_F(ElasticTest, AnActorStartedMidRunWorksFromTheNextStep) {
  const fs::path out = root_ / "joined";
  const pid_t launcher = Launch("one.yaml", "joined");
  pid_t joiner = -1;
  const int64_t recorded = ChangeWhileTheLearnerWaits(
      "joined",
      [&] {
        joiner = StartTrellis({"serve", "actor", "--scheduler",
                               Slurp(out / "launch" / "scheduler.addr"), "--secret-file",
                               (out / "launch" / "secret").string()},
                              root_ / "joiner.log");
      },
      "joiner.log", "actor-1: ready (heartbeat answered)");
  ASSERT_GE(recorded, 0);
  const int status = Wait(launcher);
  const std::string log = Slurp(root_ / "joined.log");
  ASSERT_TRUE(ExitedOk(status)) << log;
  EXPECT_TRUE(ExitedOk(Wait(joiner))) << Slurp(root_ / "joiner.log");
  EXPECT_THAT(Slurp(root_ / "joiner.log"), HasSubstr("actor-1: job over, exiting"));
  EXPECT_THAT(log, HasSubstr("actor pool: actor-1 joins"));
  ExpectPoolChangedOnce("joined", 1, 2, recorded);
}

TEST_F(ElasticTest, ADrainedActorFinishesLeavesAndLosesNoPrompt) {
  const fs::path out = root_ / "drained";
  const pid_t launcher = Launch("two.yaml", "drained");
  const int64_t recorded = ChangeWhileTheLearnerWaits(
      "drained", [&] { EXPECT_EQ(::kill(Processes(out).at("actor-1"), SIGTERM), 0); },
      "drained.log", "actor-1: draining (SIGTERM)");
  ASSERT_GE(recorded, 0);
  const int status = Wait(launcher);
  const std::string log = Slurp(root_ / "drained.log");
  ASSERT_TRUE(ExitedOk(status)) << log;
  EXPECT_THAT(log, HasSubstr("actor pool: actor-1 drained; it leaves the pool"));
  EXPECT_THAT(log, HasSubstr("actor-1: drained and released, exiting"));
  EXPECT_THAT(log, Not(HasSubstr("declared dead")));
  EXPECT_THAT(log, Not(HasSubstr("[launch] restart")));
  ExpectPoolChangedOnce("drained", 2, 1, recorded);
}

}  // namespace
}  // namespace trellis
