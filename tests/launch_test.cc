// `trellis launch`: the scheduler and every role a process of its own.
//  - With one actor, per-step rewards and final weights equal the embedded
//    run's exactly (same seed, one thread).
//  - With two actors: a Python client using only protoc stubs health-checks
//    every service and calls Verify; then one actor is SIGKILLed mid-job,
//    the scheduler declares it dead, its prompts go to the other actor, and
//    every step still trains on a full batch. No process is left behind.
//  - Two learners under ZeRO-1 (deployment.learner.count 2, memory.
//    zero_stage 1) train like one: per-step losses and final weights agree
//    to float rounding, each holds about half the optimizer state, and both
//    report the communication they added.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/safetensors.h"
#include "tests/launch_util.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
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

// testing_util::VaryingRewardsJob with `actors` actor processes.
v1::JobConfig Job(int actors, int steps, const std::string& transport = "gloo") {
  v1::JobConfig job = testing_util::VaryingRewardsJob(steps);
  auto* d = job.mutable_deployment();
  d->mutable_actor()->set_count(actors);
  d->set_heartbeat_interval_ms(200);
  d->set_heartbeat_timeout_ms(2000);
  d->set_weight_transport(transport);
  return job;
}

class LaunchTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("launch_test_" + std::to_string(::getpid()) + "_" +
             std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  fs::path root_;
};

// Over each weight transport (the parameter).
TEST_P(LaunchTest, OneActorMatchesTheEmbeddedRunExactly) {
  WriteText(root_ / "job.yaml", config::ResolvedJobYaml(Job(1, 6, GetParam())));
  const int embedded = Wait(StartTrellis(
      {"run", (root_ / "job.yaml").string(), "--out", (root_ / "embedded").string()},
      root_ / "embedded.log"));
  ASSERT_TRUE(ExitedOk(embedded)) << Slurp(root_ / "embedded.log");
  const int launched = Wait(StartTrellis(
      {"launch", (root_ / "job.yaml").string(), "--out", (root_ / "launched").string()},
      root_ / "launched.log"));
  ASSERT_TRUE(ExitedOk(launched)) << Slurp(root_ / "launched.log");

  const std::map<int64_t, double> want = StepRewards(root_ / "embedded");
  ASSERT_EQ(want.size(), 6u);
  EXPECT_EQ(StepRewards(root_ / "launched"), want);
  EXPECT_TRUE(Slurp(root_ / "embedded" / "policy.safetensors") ==
              Slurp(root_ / "launched" / "policy.safetensors"))
      << "final weights differ";
  const std::string log = Slurp(root_ / "launched.log");
  for (const char* prefix : {"[scheduler] ", "[learner-0] ", "[actor-0] ", "[verifier-0] ",
                             "[reference-0] "}) {
    EXPECT_THAT(log, HasSubstr(prefix));
  }
  // Objects recorded in the worker processes reach the run's one ledger.
  const std::string ledger = Slurp(root_ / "launched" / "ledger.jsonl");
  EXPECT_THAT(ledger, HasSubstr(R"("object":"optimizer_state","role":"learner-0")"));
  EXPECT_THAT(ledger, HasSubstr(R"("object":"kv_cache","role":"actor-0")"));
  ExpectNoneLeft(Processes(root_ / "launched"));
}

INSTANTIATE_TEST_SUITE_P(Transports, LaunchTest, ::testing::Values("gloo", "grpc"),
                         [](const auto& info) { return info.param; });

TEST_F(LaunchTest, PythonClientChecksEveryServiceThenAKilledActorsWorkIsRedone) {
  constexpr int kSteps = 150;
  const v1::JobConfig job = Job(2, kSteps);
  WriteText(root_ / "job.yaml", config::ResolvedJobYaml(job));
  const fs::path out = root_ / "run";
  const pid_t launcher =
      StartTrellis({"launch", (root_ / "job.yaml").string(), "--out", out.string()},
                   root_ / "launch.log");
  ASSERT_TRUE(WaitFor([&] { return fs::exists(out / "workers.tsv"); }, 120))
      << Slurp(root_ / "launch.log");

  // Every service, from Python with protoc-generated stubs only.
  std::map<std::string, std::string> address;
  std::map<std::string, pid_t> worker_pid;
  {
    std::ifstream in(out / "workers.tsv");
    std::string header, id, addr;
    pid_t pid;
    std::getline(in, header);
    while (in >> id >> addr >> pid) {
      address[id] = addr;
      worker_pid[id] = pid;
    }
  }
  ASSERT_EQ(address.size(), 5u) << Slurp(out / "workers.tsv");
  // The launched job is secured: the client sends the secret launch made.
  std::string command = std::string("TRELLIS_PYTHON_STUBS=") + TRELLIS_PYTHON_STUBS +
                        " TRELLIS_SECRET_FILE=" + (out / "launch" / "secret").string() + " " +
                        TRELLIS_PYTHON3 + " " + TRELLIS_SOURCE_DIR +
                        "/tests/python/check_services.py --timeout 20";
  std::string scheduler = Slurp(out / "launch" / "scheduler.addr");
  scheduler.erase(scheduler.find_last_not_of("\n") + 1);
  command += " " + scheduler;
  for (const auto& [id, addr] : address) command += " " + addr;
  command += " > " + (root_ / "python.log").string() + " 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << command << "\n" << Slurp(root_ / "python.log");
  EXPECT_THAT(Slurp(root_ / "python.log"), HasSubstr("Verify"));

  // SIGKILL actor-1 once training is under way.
  ASSERT_TRUE(WaitFor([&] { return StepRecords(out).size() >= 3; }, 120))
      << Slurp(root_ / "launch.log");
  ASSERT_EQ(::kill(worker_pid.at("actor-1"), SIGKILL), 0);
  const size_t steps_at_kill = StepRecords(out).size();
  const int status = Wait(launcher);
  const std::string log = Slurp(root_ / "launch.log");
  ASSERT_TRUE(ExitedOk(status)) << log;
  ASSERT_LT(steps_at_kill, static_cast<size_t>(kSteps)) << "the job ended before the kill";
  EXPECT_THAT(log, HasSubstr("actor-1 declared dead"));

  const std::map<int64_t, nlohmann::json> steps = StepRecords(out);
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps));
  const int64_t full = job.grpo().prompts_per_step() * job.grpo().responses_per_prompt();
  for (const auto& [step, record] : steps) {
    EXPECT_EQ(record["samples_generated"].get<int64_t>(), full) << "step " << step;
  }
  ExpectNoneLeft(Processes(out));
}

// Ctrl-C, and a role that cannot be replaced failing with no restarts
// allowed: the launcher stops the job and leaves no process behind.
TEST_F(LaunchTest, InterruptOrAFailedRoleLeavesNoProcessBehind) {
  v1::JobConfig job = Job(2, 2000);
  job.mutable_deployment()->set_max_restarts(0);
  WriteText(root_ / "job.yaml", config::ResolvedJobYaml(job));
  for (const std::string how : {"sigint", "verifier"}) {
    const fs::path out = root_ / how;
    const pid_t launcher = StartTrellis(
        {"launch", (root_ / "job.yaml").string(), "--out", out.string()}, root_ / (how + ".log"));
    ASSERT_TRUE(WaitFor([&] { return !StepRecords(out).empty(); }, 120))
        << Slurp(root_ / (how + ".log"));
    const std::map<std::string, pid_t> pids = Processes(out);
    ASSERT_EQ(pids.size(), 6u);
    if (how == "sigint") {
      ASSERT_EQ(::kill(launcher, SIGINT), 0);
    } else {
      ASSERT_EQ(::kill(pids.at("verifier-0"), SIGKILL), 0);
    }
    const int status = Wait(launcher);
    const std::string log = Slurp(root_ / (how + ".log"));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << how << ": " << log;
    EXPECT_THAT(log, HasSubstr(how == "sigint" ? "stopped by signal 2"
                                               : "verifier-0 exited (signal 9)"));
    EXPECT_LT(StepRecords(out).size(), 2000u) << how;
    ExpectNoneLeft(pids);
  }
}

// The last bytes of each (role, object) in a run's ledger.jsonl.
std::map<std::pair<std::string, std::string>, int64_t> LastObjects(const fs::path& run) {
  std::map<std::pair<std::string, std::string>, int64_t> last;
  std::ifstream in(run / "ledger.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.value("type", "") != "object") continue;
    last[{j.at("role").get<std::string>(), j.at("object").get<std::string>()}] =
        j.at("bytes").get<int64_t>();
  }
  return last;
}

TEST_F(LaunchTest, TwoZeroOneLearnersTrainLikeOne) {
  v1::JobConfig job = Job(1, 0);
  job.set_algorithm("sft");
  job.mutable_sft()->set_steps(6);
  job.mutable_memory()->set_zero_stage(1);
  WriteText(root_ / "one.yaml", config::ResolvedJobYaml(job));
  job.mutable_deployment()->mutable_learner()->set_count(2);
  WriteText(root_ / "two.yaml", config::ResolvedJobYaml(job));
  for (const char* run : {"one", "two"}) {
    const int status = Wait(StartTrellis({"launch", (root_ / (std::string(run) + ".yaml")).string(),
                                          "--out", (root_ / run).string()},
                                         root_ / (std::string(run) + ".log")));
    ASSERT_TRUE(ExitedOk(status)) << Slurp(root_ / (std::string(run) + ".log"));
  }
  const std::map<int64_t, nlohmann::json> one = StepRecords(root_ / "one");
  const std::map<int64_t, nlohmann::json> two = StepRecords(root_ / "two");
  ASSERT_EQ(one.size(), 6u);
  ASSERT_EQ(two.size(), one.size());
  for (const auto& [step, want] : one) {
    const nlohmann::json& got = two.at(step);
    EXPECT_NEAR(got.at("loss").get<double>(), want.at("loss").get<double>(), 1e-5)
        << "step " << step;
    EXPECT_NEAR(got.at("grad_norm").get<double>(), want.at("grad_norm").get<double>(),
                1e-5 * want.at("grad_norm").get<double>())
        << "step " << step;
  }
  auto a = model::LoadSafetensors((root_ / "one" / "policy.safetensors").string());
  auto b = model::LoadSafetensors((root_ / "two" / "policy.safetensors").string());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  double diff = 0;
  for (size_t i = 0; i < a->size(); ++i) {
    diff = std::max(diff, ((*a)[i].second - (*b)[i].second).abs().max().item<double>());
  }
  EXPECT_LT(diff, 1e-5) << "final weights differ";

  const auto objects_one = LastObjects(root_ / "one");
  const auto objects_two = LastObjects(root_ / "two");
  const int64_t whole = objects_one.at({"learner-0", "optimizer_state"});
  const int64_t rank0 = objects_two.at({"learner-0", "optimizer_state"});
  const int64_t rank1 = objects_two.at({"learner-1", "optimizer_state"});
  EXPECT_EQ(rank0 + rank1, whole);
  EXPECT_NEAR(rank0, whole / 2, whole / 10);
  EXPECT_EQ(objects_one.count({"learner-0", "communication"}), 0u);
  EXPECT_GT(objects_two.at({"learner-0", "communication"}), 0);
  EXPECT_GT(objects_two.at({"learner-1", "communication"}), 0);
  EXPECT_THAT(Slurp(root_ / "two.log"), HasSubstr("[learner-1] "));
  ExpectNoneLeft(Processes(root_ / "two"));
}

}  // namespace
}  // namespace trellis
