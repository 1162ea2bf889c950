#ifndef TRELLIS_TESTS_TINY_JOB_H_
#define TRELLIS_TESTS_TINY_JOB_H_

// Shared by the end-to-end tests: the default job shrunk to run in about a
// second on one thread.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "config/job_config.h"
#include "gtest/gtest.h"
#include "run/embedded_job.h"
#include "tests/job_shapes.h"

namespace trellis::testing_util {

// TinyJobConfig() (tests/job_shapes.h), failing the test if the default job
// does not load.
inline v1::JobConfig TinyJob() {
  absl::StatusOr<v1::JobConfig> job = TinyJobConfig();
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : v1::JobConfig();
}

// TinyJob() on one-digit sums after 30 SFT steps, with half credit for a
// wrong number: the rewards vary within groups, so every step carries
// gradient and a mismatch between two runs would show. `steps` GRPO steps.
inline v1::JobConfig VaryingRewardsJob(int steps) {
  v1::JobConfig job = TinyJob();
  job.mutable_data()->mutable_arithmetic()->set_max_digits(1);
  job.mutable_data()->mutable_arithmetic()->set_num_problems(100);
  job.mutable_verifier()->set_reward_wrong(0.5);
  job.mutable_sft()->set_steps(30);
  job.mutable_grpo()->set_steps(steps);
  return job;
}

#ifdef TRELLIS_SOURCE_DIR
// `job` on examples/models/qwen2_arith (a Qwen2 with a byte-level BPE
// tokenizer) and chat prompts of two-digit sums, so that its run exports a
// Hugging Face directory.
inline v1::JobConfig OnQwen2Arith(v1::JobConfig job) {
  const std::string examples = std::string(TRELLIS_SOURCE_DIR) + "/examples/";
  job.clear_model();
  job.mutable_model()->set_path(examples + "models/qwen2_arith");
  job.mutable_model()->set_max_seq_len(32);
  job.mutable_data()->set_train_path(examples + "data/chat_arith_train.jsonl");
  job.mutable_data()->set_eval_path(examples + "data/chat_arith_eval.jsonl");
  return job;
}
#endif

inline void WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

inline std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

#ifdef TRELLIS_BINARY
// Starts `trellis ARGS...` with stdout and stderr to `log`; returns its pid.
inline pid_t StartTrellis(const std::vector<std::string>& args,
                          const std::filesystem::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f == nullptr || ::dup2(::fileno(stdout), 2) < 0) _exit(127);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(TRELLIS_BINARY));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(TRELLIS_BINARY, argv.data());
    _exit(127);
  }
  return pid;
}

// Writes `job` to ROOT/NAME.yaml and runs `trellis COMMAND` on it with
// --out ROOT/NAME (output in ROOT/NAME.log); fails the test when it fails.
inline void RunTrellis(const std::filesystem::path& root, const std::string& command,
                       const std::string& name, const v1::JobConfig& job) {
  WriteText(root / (name + ".yaml"), config::ResolvedJobYaml(job));
  int status = 0;
  ::waitpid(
      StartTrellis({command, (root / (name + ".yaml")).string(), "--out", (root / name).string()},
                   root / (name + ".log")),
      &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Slurp(root / (name + ".log"));
}

// Runs `trellis COMMAND job.yaml --out ROOT/run` for `job`, SIGKILLs it as
// soon as its step-`kill_after` checkpoint is in place, and resumes it to the
// end; returns the run directory (the test fails when a stage does).
inline std::filesystem::path KillAndResume(const std::string& command,
                                           const std::filesystem::path& root,
                                           const v1::JobConfig& job, int kill_after) {
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  WriteText(root / "job.yaml", config::ResolvedJobYaml(job));
  const std::filesystem::path dir = root / "run";
  const pid_t pid = StartTrellis({command, (root / "job.yaml").string(), "--out", dir.string()},
                                 root / "first.log");
  const std::string want = "step_" + std::to_string(kill_after) + "\n";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    seen = Slurp(dir / "checkpoints" / "latest") == want;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(seen) << "no step_" << kill_after << " checkpoint within 120 s\n"
                    << Slurp(root / "first.log");
  EXPECT_TRUE(WIFSIGNALED(status)) << "the run ended before the kill";
  const pid_t resumed = StartTrellis({command, "--resume", dir.string()}, root / "resumed.log");
  ::waitpid(resumed, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Slurp(root / "resumed.log");
  return dir;
}
#endif

// Waits for `pid`; returns its wait status.
inline int Wait(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// The "step" records of DIR/ledger.jsonl by step; a step seen twice fails.
inline std::map<int64_t, nlohmann::json> StepRecords(const std::filesystem::path& dir) {
  std::map<int64_t, nlohmann::json> steps;
  std::ifstream in(dir / "ledger.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || record["type"] != "step") continue;
    const int64_t step = record["step"].get<int64_t>();
    EXPECT_EQ(steps.count(step), 0u) << "step " << step << " recorded twice";
    steps[step] = record;
  }
  return steps;
}

// step -> mean_reward of every "step" record.
inline std::map<int64_t, double> StepRewards(const std::filesystem::path& dir) {
  std::map<int64_t, double> rewards;
  for (const auto& [step, record] : StepRecords(dir)) {
    rewards[step] = record["mean_reward"].get<double>();
  }
  return rewards;
}

#ifdef TRELLIS_BINARY
// Runs `job` with `trellis run` and `trellis launch` into ROOT/run and
// ROOT/launch (ROOT emptied first) and expects `steps` step records of each
// with the same `keys`, and the same final weights; the reference worker's
// model in the launched run's one ledger.
inline void ExpectLaunchedMatchesEmbedded(const std::filesystem::path& root,
                                          const v1::JobConfig& job,
                                          const std::vector<std::string>& keys, size_t steps) {
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  for (const char* mode : {"run", "launch"}) {
    RunTrellis(root, mode, mode, job);
    if (::testing::Test::HasFatalFailure()) return;
  }
  const auto embedded = StepRecords(root / "run");
  const auto launched = StepRecords(root / "launch");
  ASSERT_EQ(embedded.size(), steps);
  ASSERT_EQ(launched.size(), embedded.size());
  for (const auto& [step, record] : embedded) {
    for (const std::string& key : keys) {
      EXPECT_EQ(launched.at(step)[key], record[key]) << key << " of step " << step;
    }
  }
  EXPECT_TRUE(Slurp(root / "run" / "policy.safetensors") ==
              Slurp(root / "launch" / "policy.safetensors"))
      << "final weights differ";
  EXPECT_NE(Slurp(root / "launch" / "ledger.jsonl")
                .find(R"("object":"reference_model","role":"reference-0")"),
            std::string::npos);
}
#endif

// An embedded run's step records, in step order, and its summary.
struct JobRun {
  std::filesystem::path dir;
  std::vector<nlohmann::json> steps;
  nlohmann::json summary;
};

// Runs `job` embedded into TempDir()/`name` (emptied first); a failed run
// fails the test.
inline JobRun RunTinyJob(const std::string& name, const v1::JobConfig& job) {
  JobRun run;
  run.dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(run.dir);
  std::ostringstream progress;
  absl::Status status = run::RunEmbeddedJob(job, run.dir.string(), progress);
  EXPECT_TRUE(status.ok()) << status << "\n" << progress.str();
  for (const auto& [step, record] : StepRecords(run.dir)) run.steps.push_back(record);
  run.summary = nlohmann::json::parse(Slurp(run.dir / "summary.json"), nullptr, false);
  return run;
}

// Mean of `key` over the run's steps [begin, end).
inline double MeanOver(const JobRun& run, const char* key, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += run.steps[i][key].get<double>();
  return sum / (end - begin);
}

}  // namespace trellis::testing_util

#endif  // TRELLIS_TESTS_TINY_JOB_H_
