// `trellis resolve`, `plan`, `place`, `run` and `launch` refuse the same bad
// numbers with the same error, through the one validation they share
// (loop::PrepareJob), before anything of the job's size is allocated and
// before a run directory or a process exists: an infinite learning rate, a
// batch of 2^31 - 1 and of 2^31, 100,000 layers, a model beyond the
// machine's memory, and an empty job file.

#include <sys/wait.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing_util::Slurp;
using testing_util::StartTrellis;
using testing_util::Wait;
using testing_util::WriteText;

struct BadJob {
  const char* name;
  const char* yaml;
  const char* error;
  int exit_code;
};

const BadJob kBadJobs[] = {
    {"lr_inf", "grpo: {optimizer: {lr: .inf}}\n", "grpo.optimizer.lr: must be in (0, 1], found inf",
     2},
    {"batch_2_31", "grpo: {prompts_per_step: 2147483648}\n",
     "grpo.prompts_per_step: expected an integer in [-2147483648, 2147483647]", 2},
    {"batch_2_31_minus_1", "grpo: {prompts_per_step: 2147483647}\n",
     "grpo.prompts_per_step: must be <= 1048576, found 2147483647", 2},
    {"layers_100000", "model: {n_layers: 100000}\n",
     "model.n_layers: must be <= 1024, found 100000", 2},
    {"beyond_memory",
     "model: {d_model: 65536, n_heads: 512, n_kv_heads: 512, d_ff: 262144, n_layers: 1024}\n",
     "the job does not fit in this machine's memory", 1},
    {"empty", "# nothing but a comment\n", "the job file is empty", 2},
};

TEST(BadNumbersTest, EveryCommandRefusesTheSameJobWithTheSameError) {
  const fs::path root = fs::path(::testing::TempDir()) / "bad_numbers_test";
  fs::remove_all(root);
  fs::create_directories(root);
  for (const BadJob& bad : kBadJobs) {
    const fs::path job = root / (std::string(bad.name) + ".yaml");
    WriteText(job, bad.yaml);
    const fs::path out = root / (std::string(bad.name) + "_out");
    const std::vector<std::vector<std::string>> commands = {
        {"resolve", job.string()},
        {"plan", job.string()},
        {"place", job.string()},
        {"run", job.string(), "--out", out.string()},
        {"launch", job.string(), "--out", out.string()}};
    for (const std::vector<std::string>& args : commands) {
      const std::string what = std::string(bad.name) + ": trellis " + args[0];
      const fs::path log = root / (std::string(bad.name) + "_" + args[0] + ".log");
      const int status = Wait(StartTrellis(args, log));
      ASSERT_TRUE(WIFEXITED(status)) << what << ": killed by signal " << WTERMSIG(status);
      EXPECT_EQ(WEXITSTATUS(status), bad.exit_code) << what << "\n" << Slurp(log);
      EXPECT_THAT(Slurp(log), HasSubstr(bad.error)) << what;
      EXPECT_THAT(Slurp(log), ::testing::Not(HasSubstr("terminate called"))) << what;
      if (args.size() > 2) EXPECT_FALSE(fs::exists(out)) << what << ": a run directory exists";
    }
  }
}

}  // namespace
}  // namespace trellis
