// memory.process_memory_limit_bytes on a real launched job
// (examples/memory/process_memory_limit.yaml over
// examples/jobs/default_short.yaml: a 121M-parameter policy, a limit of
// 2.4 GB a process; docs/parallelism.md, "Planning and placing sharded
// jobs"):
//  - at one learner `trellis plan` refuses it with the plan's numbers, and
//    `trellis launch` of it is stopped at run time by the learner's
//    measured peak (VmHWM, checked at every heartbeat);
//  - at four ZeRO-3 ranks the plan fits, the job trains to its last step,
//    and every process's measured peak (the workers' forwarded to
//    summary.json memory.worker_processes, the scheduler's own
//    memory.process) is under the limit. The peaks are printed, to re-tune
//    the limit when what a process holds changes.
// Nothing here depends on the clock.

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/launch_util.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing_util::ExitedOk;
using testing_util::Slurp;

// The example job with `learners` learner ranks.
v1::JobConfig LimitedJob(int learners) {
  const std::string examples = std::string(TRELLIS_SOURCE_DIR) + "/examples/";
  absl::StatusOr<v1::JobConfig> job =
      config::LoadJobFile(examples + "jobs/default_short.yaml");
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return {};
  const absl::Status merged =
      config::LoadYamlFile(examples + "memory/process_memory_limit.yaml", &*job);
  EXPECT_TRUE(merged.ok()) << merged;
  job->mutable_deployment()->mutable_learner()->set_count(learners);
  return *job;
}

// The number of `group` of the first match of `pattern` in `text`; -1 when
// nothing matches.
int64_t Matched(const std::string& text, const std::string& pattern, int group) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  return std::stoll(m[group].str());
}

class MemoryLimitLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("memory_limit_launch_test_" + std::to_string(::getpid()));
    fs::create_directories(root_);
  }
  // The runs' weights take 1.4 GB; a failed test's stay to be read.
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(root_);
  }

  struct Outcome {
    int status = 0;
    std::string log;
  };
  // `trellis COMMAND ROOT/NAME.yaml` for `learners` ranks of the job
  // (launch: --out ROOT/NAME).
  Outcome Trellis(const std::string& command, const std::string& name, int learners) {
    const fs::path yaml = root_ / (name + ".yaml");
    testing_util::WriteText(yaml, config::ResolvedJobYaml(LimitedJob(learners)));
    std::vector<std::string> args = {command, yaml.string()};
    if (command == "launch") args.insert(args.end(), {"--out", (root_ / name).string()});
    const fs::path log = root_ / (name + "." + command + ".log");
    const int status = testing_util::Wait(testing_util::StartTrellis(args, log));
    return {status, Slurp(log)};
  }

  fs::path root_;
  const int64_t limit_ = LimitedJob(1).memory().process_memory_limit_bytes();
};

TEST_F(MemoryLimitLaunchTest, OneLearnerIsRefusedByThePlanAndStoppedAtRunTime) {
  ASSERT_GT(limit_, 0);
  const std::string limit = absl::StrCat(" \\(", limit_, " bytes\\)");
  const Outcome plan = Trellis("plan", "one", 1);
  EXPECT_FALSE(ExitedOk(plan.status)) << plan.log;
  EXPECT_THAT(plan.log, HasSubstr("-- learner-0: peak "));
  EXPECT_THAT(plan.log, HasSubstr(", OVER THE LIMIT --"));
  const std::string refusal =
      absl::StrCat("learner-0 peaks at [0-9.]+ GiB \\(([0-9]+) bytes, at [a-z_]+\\) by the plan, "
                   "over the limit [0-9.]+ GiB",
                   limit, "; the smallest deployment\\.learner\\.count that fits: ([0-9]+)");
  const int64_t priced = Matched(plan.log, refusal, 1);
  EXPECT_GT(priced, limit_) << plan.log;
  const int64_t fits = Matched(plan.log, refusal, 2);
  EXPECT_GE(fits, 2) << plan.log;
  EXPECT_LE(fits, 4) << plan.log;

  // Launched anyway, the one learner's measured peak passes the limit.
  const Outcome run = Trellis("launch", "one", 1);
  EXPECT_FALSE(ExitedOk(run.status)) << run.log;
  const int64_t measured = Matched(
      run.log,
      absl::StrCat("RESOURCE_EXHAUSTED: learner-0: peak resident memory [0-9.]+ MiB \\(([0-9]+) "
                   "bytes\\) passed memory\\.process_memory_limit_bytes [0-9.]+ MiB",
                   limit),
      1);
  EXPECT_GT(measured, limit_) << run.log;
  std::cout << "one learner: priced " << priced << " bytes by the plan, stopped at a measured "
            << measured << " bytes; limit " << limit_ << "\n";
  testing_util::ExpectNoneLeft(testing_util::Processes(root_ / "one"));
}

TEST_F(MemoryLimitLaunchTest, FourRanksTrainWithEveryProcessUnderTheLimit) {
  const Outcome plan = Trellis("plan", "four", 4);
  ASSERT_TRUE(ExitedOk(plan.status)) << plan.log;
  EXPECT_THAT(plan.log, HasSubstr("-- learner-0 (one of 4 ranks, memory.zero_stage 3): peak "));
  EXPECT_THAT(plan.log, ::testing::Not(HasSubstr("-- learner-0: ")));

  const Outcome run = Trellis("launch", "four", 4);
  ASSERT_TRUE(ExitedOk(run.status)) << run.log;
  const fs::path out = root_ / "four";
  EXPECT_EQ(testing_util::StepRecords(out).size(),
            static_cast<size_t>(LimitedJob(4).grpo().steps()));
  EXPECT_TRUE(fs::exists(out / "policy.safetensors"));

  const nlohmann::json memory = nlohmann::json::parse(Slurp(out / "summary.json"))["memory"];
  nlohmann::json peaks = memory["worker_processes"];
  peaks["scheduler"] = memory["process"];
  std::set<std::string> names;
  std::cout << "measured peak resident memory (VmHWM), limit " << limit_ << " bytes:\n";
  for (const auto& [name, process] : peaks.items()) {
    names.insert(name);
    const int64_t peak = process["peak_resident_bytes"].get<int64_t>();
    EXPECT_GT(peak, 0) << name;
    EXPECT_LT(peak, limit_) << name << ": " << process.dump(2);
    std::cout << absl::StrFormat("  %-12s %6.0f MB  (%.0f%% of the limit)\n", name, peak / 1e6,
                                 100.0 * static_cast<double>(peak) / static_cast<double>(limit_));
  }
  EXPECT_EQ(names, (std::set<std::string>{"scheduler", "learner-0", "learner-1", "learner-2",
                                          "learner-3", "actor-0", "reference-0", "verifier-0"}));
  testing_util::ExpectNoneLeft(testing_util::Processes(out));
}

}  // namespace
}  // namespace trellis
