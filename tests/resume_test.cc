// End-to-end: exact resume of GRPO and PPO jobs, embedded and launched. 10
// steps straight against 5 steps, a SIGKILL, and a resume for the rest:
// identical per-step rewards and bit-identical final weights and optimizer
// state. Damaged checkpoints are refused.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "config/job_config.h"
#include "loop/recipe.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "run/embedded_job.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kSteps = 10;
constexpr int kCheckpointEvery = 5;

using testing_util::Slurp;
using testing_util::StartTrellis;
using testing_util::StepRewards;
using testing_util::Wait;
using testing_util::WriteText;

v1::JobConfig TinyJob() {
  v1::JobConfig job = testing_util::VaryingRewardsJob(kSteps);
  job.mutable_runtime()->set_checkpoint_every(kCheckpointEvery);
  // Launched, one actor: the same samples as the embedded run.
  job.mutable_deployment()->mutable_actor()->set_count(1);
  return job;
}

// One straight run of `job` per suite, shared by its tests (it takes most
// of their time), in TempDir()/<Suite>.
template <typename Suite>
class StraightRunFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::path(testing::TempDir()) / Suite::kName;
    fs::remove_all(root_);
    fs::create_directories(root_);
    WriteText(root_ / "job.yaml", config::ResolvedJobYaml(Suite::Job()));
    const fs::path straight = root_ / "straight";
    const int status = Wait(StartTrellis(
        {"run", (root_ / "job.yaml").string(), "--out", straight.string()}, root_ / "straight.log"));
    straight_ok_ = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

  void SetUp() override {
    ASSERT_TRUE(straight_ok_) << Slurp(root_ / "straight.log");
  }

  // A copy of the straight run's directory, to damage.
  fs::path CopyOfStraight(const std::string& name) {
    const fs::path dir = root_ / name;
    fs::remove_all(dir);
    fs::copy(root_ / "straight", dir, fs::copy_options::recursive);
    return dir;
  }

  // `trellis COMMAND job.yaml` (run or launch) into root/NAME, SIGKILLed as
  // soon as the step-5 checkpoint is in place (a launch's processes die
  // with it), then `trellis COMMAND --resume`: the resumed run gives the
  // straight run's per-step rewards and bit-identical final weights.
  void KillResumeAndCompare(const std::string& command, const std::string& name) {
    const fs::path dir = root_ / name;
    fs::remove_all(dir);
    const pid_t pid = StartTrellis({command, (root_ / "job.yaml").string(), "--out", dir.string()},
                                   root_ / (name + ".log"));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    bool seen = false;
    while (!seen && std::chrono::steady_clock::now() < deadline) {
      seen = Slurp(dir / "checkpoints" / "latest") == "step_5\n";
      if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ::kill(pid, SIGKILL);
    const int status = Wait(pid);
    ASSERT_TRUE(seen) << "no step_5 checkpoint within 120 s\n" << Slurp(root_ / (name + ".log"));
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the run ended before the kill; status " << status;
    ASSERT_FALSE(fs::exists(dir / "policy.safetensors"));

    const fs::path resumed_log = root_ / (name + "_resumed.log");
    const int resumed = Wait(StartTrellis({command, "--resume", dir.string()}, resumed_log));
    ASSERT_TRUE(WIFEXITED(resumed) && WEXITSTATUS(resumed) == 0) << Slurp(resumed_log);
    EXPECT_THAT(Slurp(resumed_log), HasSubstr("resuming from"));

    const std::map<int64_t, double> want = StepRewards(root_ / "straight");
    ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
    // Not a vacuous comparison: the straight run trained on real signal.
    const auto a = nlohmann::json::parse(Slurp(root_ / "straight" / "summary.json"));
    EXPECT_GT(a["samples"]["effective"].get<int64_t>(), 0);
    EXPECT_EQ(StepRewards(dir), want);
    const std::string weights = Slurp(root_ / "straight" / "policy.safetensors");
    ASSERT_FALSE(weights.empty());
    EXPECT_TRUE(weights == Slurp(dir / "policy.safetensors")) << "final weights differ";
    const fs::path last = fs::path("checkpoints") / absl::StrCat("step_", kSteps);
    for (const fs::path& part : fs::directory_iterator(root_ / "straight" / last)) {
      // state.json holds timings; a launched run's rng.safetensors is the
      // scheduler process's generator, not the embedded run's.
      if (part.filename() == "state.json") continue;
      if (part.filename() == "rng.safetensors" && command == "launch") continue;
      EXPECT_TRUE(Slurp(part) == Slurp(dir / last / part.filename()))
          << part.filename() << " differs";
    }

    // The summary covers the whole run, not only the resumed half.
    const auto b = nlohmann::json::parse(Slurp(dir / "summary.json"));
    EXPECT_EQ(b["steps"], kSteps);
    EXPECT_EQ(b["samples"], a["samples"]);
    EXPECT_EQ(b["tokens"], a["tokens"]);
    EXPECT_EQ(b["eval"], a["eval"]);
    ExpectStraightEvalAnswers(dir);
  }

  // `dir`'s eval/ holds the straight run's files, byte for byte: none lost
  // by the kill, none doubled by the resume (greedy evaluations repeat).
  void ExpectStraightEvalAnswers(const fs::path& dir) {
    std::vector<std::string> names;
    for (const fs::path& file : fs::directory_iterator(root_ / "straight" / "eval")) {
      names.push_back(file.filename().string());
      EXPECT_EQ(Slurp(dir / "eval" / file.filename()), Slurp(file)) << file.filename();
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, std::vector<std::string>({"after.jsonl", "before.jsonl"}));
    for (const fs::path& file : fs::directory_iterator(dir / "eval")) {
      EXPECT_TRUE(fs::exists(root_ / "straight" / "eval" / file.filename())) << file.filename();
    }
  }

  static fs::path root_;
  static bool straight_ok_;
};

template <typename Suite>
fs::path StraightRunFixture<Suite>::root_;
template <typename Suite>
bool StraightRunFixture<Suite>::straight_ok_ = false;

class ResumeTest : public StraightRunFixture<ResumeTest> {
 public:
  static constexpr char kName[] = "resume_test";
  static v1::JobConfig Job() { return TinyJob(); }
};

TEST_F(ResumeTest, KilledAndResumedRunMatchesStraightRun) {
  KillResumeAndCompare("run", "killed");
}

// The same with every role a process, against the embedded straight run.
TEST_F(ResumeTest, KilledAndResumedLaunchMatchesStraightRun) {
  KillResumeAndCompare("launch", "launched");
}

// PPO: the checkpoint also holds the critic and its optimizer.
class PpoResumeTest : public StraightRunFixture<PpoResumeTest> {
 public:
  static constexpr char kName[] = "ppo_resume_test";
  static v1::JobConfig Job() {
    v1::JobConfig job = TinyJob();
    job.set_algorithm("ppo");
    return job;
  }
};

TEST_F(PpoResumeTest, KilledAndResumedRunMatchesStraightRun) {
  KillResumeAndCompare("run", "killed");
}

TEST_F(PpoResumeTest, KilledAndResumedLaunchMatchesStraightRun) {
  KillResumeAndCompare("launch", "launched");
}

// A job from a Hugging Face directory (examples/models/qwen2_arith: a
// Qwen2 with a byte-level BPE tokenizer) on chat prompts: resumed exactly,
// embedded and launched, and the policy exported as a Hugging Face
// directory of the same family and stored dtype.
class HfResumeTest : public StraightRunFixture<HfResumeTest> {
 public:
  static constexpr char kName[] = "hf_resume_test";
  static v1::JobConfig Job() {
    v1::JobConfig job = testing_util::OnQwen2Arith(TinyJob());
    job.mutable_eval()->set_num_prompts(32);
    // Two-digit sums from a random model after a short warm-up: any number
    // within 20 of the sum counts as right, so that groups differ and every
    // step carries gradient.
    job.mutable_sft()->set_steps(80);
    job.mutable_verifier()->set_tolerance(20);
    EXPECT_TRUE(loop::PrepareJob(&job).ok());
    return job;
  }
};

TEST_F(HfResumeTest, KilledAndResumedRunMatchesStraightRun) {
  KillResumeAndCompare("run", "killed");
}

TEST_F(HfResumeTest, KilledAndResumedLaunchMatchesStraightRun) {
  KillResumeAndCompare("launch", "launched");
}

TEST_F(HfResumeTest, ThePolicyIsExportedAsTheSourcesFamily) {
  const fs::path hf = root_ / "straight" / "hf";
  const auto config = nlohmann::json::parse(Slurp(hf / "config.json"));
  EXPECT_EQ(config["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(config["dtype"], "bfloat16");
  EXPECT_EQ(config["vocab_size"], 281);
  for (const char* file : {"model.safetensors", "tokenizer.json", "tokenizer_config.json",
                           "chat_template.jinja", "generation_config.json"}) {
    EXPECT_TRUE(fs::exists(hf / file)) << file;
  }
}

// The same job under LoRA: OUT/hf holds the merged policy, OUT/hf_adapter
// the adapters in PEFT's format over the source directory.
class HfLoraTest : public StraightRunFixture<HfLoraTest> {
 public:
  static constexpr char kName[] = "hf_lora_test";
  static v1::JobConfig Job() {
    v1::JobConfig job = HfResumeTest::Job();
    job.mutable_memory()->mutable_lora()->set_rank(2);
    return job;
  }
};

TEST_F(HfLoraTest, TheAdaptersAreExportedForPeft) {
  const fs::path adapter = root_ / "straight" / "hf_adapter";
  const auto config = nlohmann::json::parse(Slurp(adapter / "adapter_config.json"));
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["r"], 2);
  EXPECT_EQ(config["base_model_name_or_path"], HfLoraTest::Job().model().path());
  EXPECT_THAT(Slurp(adapter / "adapter_model.safetensors"),
              HasSubstr("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT_TRUE(fs::exists(root_ / "straight" / "hf" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(root_ / "straight" / "hf_adapter.checkpoint"));
}

TEST_F(ResumeTest, ResumingAFinishedRunRedoesOnlyTheFinalEval) {
  const fs::path dir = CopyOfStraight("finished");
  std::ostringstream progress;
  absl::Status s = run::ResumeEmbeddedJob(dir.string(), progress);
  ASSERT_TRUE(s.ok()) << s << "\n" << progress.str();
  EXPECT_EQ(StepRewards(dir), StepRewards(root_ / "straight"));
  EXPECT_TRUE(Slurp(dir / "policy.safetensors") ==
              Slurp(root_ / "straight" / "policy.safetensors"));
  ExpectStraightEvalAnswers(dir);
}

TEST_F(ResumeTest, CorruptedOptimizerStateIsRefused) {
  const fs::path dir = CopyOfStraight("corrupt_optimizer");
  const fs::path file = dir / "checkpoints" / "step_10" / "optimizer.safetensors";
  std::string bytes = Slurp(file);
  ASSERT_GT(bytes.size(), 100u);
  bytes[bytes.size() - 7] ^= 0x20;
  WriteText(file, bytes);
  std::ostringstream progress;
  absl::Status s = run::ResumeEmbeddedJob(dir.string(), progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("checkpoint part optimizer.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("corrupted"));
  // Refused before anything was touched.
  EXPECT_EQ(Slurp(dir / "ledger.jsonl"), Slurp(root_ / "straight" / "ledger.jsonl"));
}

TEST_F(ResumeTest, TruncatedOrMissingPartIsRefused) {
  const fs::path dir = CopyOfStraight("truncated");
  const fs::path weights = dir / "checkpoints" / "step_10" / "weights.safetensors";
  WriteText(weights, Slurp(weights).substr(0, 100));
  std::ostringstream progress;
  absl::Status s = run::ResumeEmbeddedJob(dir.string(), progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("checkpoint part weights.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("truncated"));

  fs::remove(dir / "reference.safetensors");
  fs::copy_file(root_ / "straight" / "checkpoints" / "step_10" / "weights.safetensors", weights,
                fs::copy_options::overwrite_existing);
  s = run::ResumeEmbeddedJob(dir.string(), progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("reference.safetensors is missing"));
}

TEST_F(ResumeTest, OtherFormatVersionOrModelShapeIsRefused) {
  const fs::path dir = CopyOfStraight("incompatible");
  const fs::path state = dir / "checkpoints" / "step_10" / "state.json";
  const std::string original = Slurp(state);
  auto j = nlohmann::json::parse(original);
  j["format"] = 99;
  WriteText(state, j.dump());
  std::ostringstream progress;
  absl::Status s = run::ResumeEmbeddedJob(dir.string(), progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("format 99"));

  WriteText(state, original);
  v1::JobConfig wider = TinyJob();
  wider.mutable_model()->set_d_ff(96);
  WriteText(dir / "job.yaml", config::ResolvedJobYaml(wider));
  s = run::ResumeEmbeddedJob(dir.string(), progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("optimizer.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("does not match the parameter"));
}

TEST_F(ResumeTest, NoCheckpointIsNotFound) {
  const fs::path dir = CopyOfStraight("no_checkpoint");
  fs::remove_all(dir / "checkpoints");
  std::ostringstream progress;
  absl::Status s = run::ResumeEmbeddedJob(dir.string(), progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr("checkpoints/latest"));
}

}  // namespace
}  // namespace trellis
