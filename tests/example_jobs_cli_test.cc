// Every job file of examples/jobs/ through the real command line, shortened
// by an --override file (a step or two of each stage, small batches):
// `trellis run` and `trellis launch` both finish, the launched run's
// per-step rewards are the embedded run's, and both runs and the launcher
// write one and the same resolved job (OUT/job.yaml, OUT/launch/job.yaml:
// the model's shape from model.path's config.json, resolved once). The
// examples that start from another run's output get it from the example
// that makes it (lora.yaml from sft.yaml's policy, ppo_reward_model.yaml
// from reward_model.yaml's reward model). A runtime.device cuda example is
// resolved and planned; it runs only where a CUDA device is visible, and is
// launched only where this host has the GPUs its placement asks for.
//
// And examples/jobs/hf_grpo.yaml (a Hugging Face model directory, two
// actors) trained long enough that its rewards vary: launched, its
// per-step rewards equal the embedded run's with the same seed.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/device.h"
#include "tests/launch_util.h"
#include "tests/made_model.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using testing_util::ExitedOk;
using testing_util::Slurp;
using testing_util::StartTrellis;
using testing_util::StepRecords;
using testing_util::Wait;
using testing_util::WriteText;

// Every example, shortened; fields of stages a job does not have are
// ignored by its recipe.
constexpr char kShort[] = R"yaml(
sft: {steps: 2, batch_size: 16}
grpo: {steps: 2, prompts_per_step: 4, responses_per_prompt: 4}
dpo: {steps: 2, batch_size: 4}
reward_model: {steps: 2, batch_size: 8}
eval: {num_prompts: 8}
)yaml";

std::vector<std::string> ExampleJobs() {
  std::vector<std::string> names;
  for (const auto& entry :
       fs::directory_iterator(fs::path(TRELLIS_SOURCE_DIR) / "examples" / "jobs")) {
    if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

fs::path Root() { return fs::path(::testing::TempDir()) / "example_jobs_cli_test"; }

fs::path JobFile(const std::string& name) {
  return fs::path(TRELLIS_SOURCE_DIR) / "examples" / "jobs" / (name + ".yaml");
}

// `trellis ARGS...` from the source directory (job files name their data
// relative to it), its output in LOG; true when it exits 0.
bool Trellis(const std::vector<std::string>& args, const fs::path& log) {
  fs::current_path(TRELLIS_SOURCE_DIR);
  return ExitedOk(Wait(StartTrellis(args, log)));
}

// What an example needs from another example's run, as override lines.
std::string Inputs(const std::string& name);

// ROOT/NAME/override.yaml: kShort and the example's inputs.
fs::path Override(const std::string& name) {
  const fs::path dir = Root() / name;
  fs::create_directories(dir);
  WriteText(dir / "override.yaml", absl::StrCat(kShort, Inputs(name)));
  return dir / "override.yaml";
}

// Runs the example shortened with `command` (run or launch) into
// ROOT/NAME/COMMAND, once per test program; the run directory, or empty
// after failing the test.
fs::path Shortened(const std::string& name, const std::string& command) {
  static std::map<std::pair<std::string, std::string>, fs::path>* done =
      new std::map<std::pair<std::string, std::string>, fs::path>();
  if (done->count({name, command})) return done->at({name, command});
  const fs::path out = Root() / name / command;
  fs::remove_all(out);
  const fs::path log = Root() / name / (command + ".log");
  const bool ok = Trellis({command, JobFile(name).string(), "--override", Override(name).string(),
                           "--out", out.string()},
                          log);
  EXPECT_TRUE(ok) << "trellis " << command << " " << name << ".yaml:\n" << Slurp(log);
  if (!ok) return fs::path();
  (*done)[{name, command}] = out;
  return out;
}

std::string Inputs(const std::string& name) {
  if (name == "lora") {
    const fs::path sft = Shortened("sft", "run");
    return absl::StrCat("model: {init_checkpoint: ", (sft / "policy.safetensors").string(), "}\n");
  }
  if (name == "distill") {
    const fs::path teacher = Shortened("distill_teacher", "run");
    return absl::StrCat("distill: {teacher: {init_checkpoint: ",
                        (teacher / "policy.safetensors").string(), "}}\n");
  }
  if (name == "ppo_reward_model") {
    const fs::path rm = Shortened("reward_model", "run");
    return absl::StrCat("ppo: {reward_model_path: ", (rm / "reward_model.safetensors").string(),
                        "}\n");
  }
  return "";
}

// step -> mean_reward of the run's step records that carry one.
std::map<int64_t, double> Rewards(const fs::path& run) {
  std::map<int64_t, double> rewards;
  for (const auto& [step, record] : StepRecords(run)) {
    if (record.contains("mean_reward")) rewards[step] = record["mean_reward"].get<double>();
  }
  return rewards;
}

// Both runs trained the same steps with the same rewards, on one resolved
// job: the launcher's is the launched run's, and the embedded run's but
// for the run directory (runtime.out_dir).
void ExpectSameRun(const fs::path& embedded, const fs::path& launched) {
  const std::map<int64_t, nlohmann::json> steps = StepRecords(embedded);
  EXPECT_FALSE(steps.empty());
  EXPECT_EQ(StepRecords(launched).size(), steps.size());
  EXPECT_EQ(Rewards(launched), Rewards(embedded));
  const std::string job = Slurp(launched / "job.yaml");
  EXPECT_EQ(Slurp(launched / "launch" / "job.yaml"), job);
  std::string embedded_job = Slurp(embedded / "job.yaml");
  const std::string out_dir = absl::StrCat("  out_dir: \"", embedded.string(), "\"\n");
  ASSERT_TRUE(absl::StrContains(embedded_job, out_dir)) << embedded_job;
  embedded_job.replace(embedded_job.find(out_dir), out_dir.size(),
                       absl::StrCat("  out_dir: \"", launched.string(), "\"\n"));
  EXPECT_EQ(job, embedded_job);
}

class ExampleJobsCliTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExampleJobsCliTest, RunsEmbeddedAndLaunched) {
  const std::string name = GetParam();
  const fs::path dir = Root() / name;
  const fs::path override_file = Override(name);
  absl::StatusOr<v1::JobConfig> job = config::LoadJobFile(JobFile(name).string());
  ASSERT_TRUE(job.ok()) << job.status();
  fs::current_path(TRELLIS_SOURCE_DIR);  // model.path is relative to it
  if (testing_util::ModelNotMade(*job)) {
    GTEST_SKIP() << name << ".yaml: its model " << job->model().path()
                 << " is not made here (scripts/real_model.sh makes it)";
  }
  if (job->runtime().device() == v1::RuntimeConfig::CUDA) {
    for (const char* command : {"resolve", "plan"}) {
      EXPECT_TRUE(Trellis({command, JobFile(name).string()}, dir / (std::string(command) + ".log")))
          << "trellis " << command << " " << name << ".yaml:\n"
          << Slurp(dir / (std::string(command) + ".log"));
    }
    if (absl::Status visible = model::CheckDeviceVisible(*job); !visible.ok()) {
      GTEST_SKIP() << name << ".yaml resolved and planned only: " << visible.message();
    }
  }
  const fs::path embedded = Shortened(name, "run");
  ASSERT_FALSE(embedded.empty());
  if (job->runtime().device() == v1::RuntimeConfig::CUDA &&
      !Trellis({"place", JobFile(name).string()}, dir / "place.log")) {
    GTEST_SKIP() << name << ".yaml ran embedded only; this host cannot place it: "
                 << Slurp(dir / "place.log");
  }
  const fs::path launched = Shortened(name, "launch");
  ASSERT_FALSE(launched.empty());
  ExpectSameRun(embedded, launched);
  EXPECT_THAT(Slurp(dir / "launch.log"), ::testing::HasSubstr("[launch] job finished"));
}

INSTANTIATE_TEST_SUITE_P(Examples, ExampleJobsCliTest, ::testing::ValuesIn(ExampleJobs()),
                         [](const auto& info) { return info.param; });

// hf_grpo.yaml's warm-up long enough, and its verifier lenient enough (any
// number within 20 of the sum), that rewards differ from step to step.
TEST(HfGrpoCliTest, LaunchedWithTwoActorsRewardsEqualTheEmbeddedRun) {
  const fs::path dir = Root() / "hf_grpo_rewards";
  fs::remove_all(dir);
  fs::create_directories(dir);
  WriteText(dir / "override.yaml", R"yaml(
sft: {steps: 40}
grpo: {steps: 3, prompts_per_step: 8, responses_per_prompt: 4}
verifier: {tolerance: 20}
eval: {num_prompts: 16}
)yaml");
  for (const char* command : {"run", "launch"}) {
    const fs::path log = dir / (std::string(command) + ".log");
    ASSERT_TRUE(Trellis(
        {command, JobFile("hf_grpo").string(), "--override", (dir / "override.yaml").string(),
         "--seed", "7", "--out", (dir / command).string()},
        log))
        << Slurp(log);
  }
  const std::map<int64_t, double> want = Rewards(dir / "run");
  ASSERT_EQ(want.size(), 3u);
  EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](const auto& r) { return r.second > 0; }))
      << "every reward 0: the comparison would show nothing";
  ExpectSameRun(dir / "run", dir / "launch");
  // Both actors worked: two processes each given the resolved job.
  const std::string log = Slurp(dir / "launch.log");
  EXPECT_THAT(log, ::testing::HasSubstr("[actor-0] "));
  EXPECT_THAT(log, ::testing::HasSubstr("[actor-1] "));
  EXPECT_THAT(Slurp(dir / "launch" / "launch" / "job.yaml"),
              ::testing::HasSubstr("vocab_size: 281"));
}

}  // namespace
}  // namespace trellis
