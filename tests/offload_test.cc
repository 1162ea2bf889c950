// CPU offload and the colocated placement on a tiny embedded job: moving
// the optimizer state, the reference and the actor's weights between the
// device and host memory changes no bit of the training (rewards, losses,
// final weights, saved optimizer state, a resume from a checkpoint), and
// the ledger records every move with the moved object's size; `trellis
// compare` of two runs prints the moves line (issue 15, done-when 4).

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "config/job_config.h"
#include "gtest/gtest.h"
#include "run/embedded_job.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing_util::JobRun;
using testing_util::RunTinyJob;
using testing_util::Slurp;

// Varying rewards (every step updates), a reference (grpo.kl_coef's
// default), a checkpoint after every step.
v1::JobConfig BaseJob() {
  v1::JobConfig job = testing_util::VaryingRewardsJob(3);
  job.mutable_runtime()->set_checkpoint_every(1);
  return job;
}

const JobRun& Baseline() {
  static const JobRun* run = new JobRun(RunTinyJob("offload_base", BaseJob()));
  return *run;
}

// The "move" records of a run, in order.
std::vector<json> Moves(const fs::path& dir) {
  std::vector<json> moves;
  std::ifstream in(dir / "ledger.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    json r = json::parse(line, nullptr, false);
    if (!r.is_discarded() && r["type"] == "move") moves.push_back(r);
  }
  return moves;
}

int64_t Largest(const JobRun& run, const std::string& key) {
  const json& lifetimes = run.summary["memory"]["lifetimes"];
  return lifetimes.contains(key) ? lifetimes[key]["largest_bytes"].get<int64_t>() : 0;
}

// The same training, bit for bit: per-step rewards and losses, the final
// weights, and the optimizer state each checkpoint saved.
void ExpectSameTraining(const JobRun& run) {
  const JobRun& base = Baseline();
  ASSERT_EQ(run.steps.size(), base.steps.size());
  EXPECT_FALSE(Slurp(base.dir / "checkpoints/step_1/optimizer.safetensors").empty());
  for (size_t i = 0; i < run.steps.size(); ++i) {
    EXPECT_EQ(run.steps[i]["mean_reward"], base.steps[i]["mean_reward"]) << "step " << i;
    EXPECT_EQ(run.steps[i]["loss"], base.steps[i]["loss"]) << "step " << i;
    const std::string ckpt = "checkpoints/step_" + std::to_string(i + 1) + "/optimizer.safetensors";
    EXPECT_TRUE(Slurp(run.dir / ckpt) == Slurp(base.dir / ckpt)) << ckpt << " differs";
  }
  EXPECT_TRUE(Slurp(run.dir / "policy.safetensors") == Slurp(base.dir / "policy.safetensors"))
      << "final weights differ";
}

// The peaks of the roles that move tensors still explained by their
// objects as well as the baseline's (offloaded bytes are not on the device
// at them). The scheduler's checkpoint span is left out: its copies of the
// optimizer state are unattributed in the baseline too, and more so when
// the state they copy is in host memory.
void ExpectAttributed(const JobRun& run) {
  const json& base = Baseline().summary["memory"]["role_peaks"];
  for (const auto& [role, peak] : run.summary["memory"]["role_peaks"].items()) {
    if (role == "scheduler") continue;
    const double bound =
        std::max(0.05, base.contains(role)
                           ? std::abs(base[role]["unattributed_fraction"].get<double>()) + 0.01
                           : 0.0);
    EXPECT_LE(std::abs(peak["unattributed_fraction"].get<double>()), bound) << role << "\n"
                                                                            << peak.dump(2);
  }
}

void PrintMoves(const std::string& name, const JobRun& run) {
  std::cout << name << ": moves " << run.summary["moves"].dump() << "\n";
}

TEST(OffloadTest, OptimizerStateAndFrozenOffloadTrainTheSameAndRecordTheirMoves) {
  v1::JobConfig job = BaseJob();
  job.mutable_memory()->set_offload_optimizer_state(true);
  job.mutable_memory()->set_offload_frozen(true);
  const JobRun run = RunTinyJob("offload_state_frozen", job);
  ExpectSameTraining(run);
  ExpectAttributed(run);
  PrintMoves("offload", run);
  EXPECT_EQ(Baseline().summary["moves"]["count"], 0);

  // The RL phase's AdamW state: two moments of every parameter. The
  // reference: its weights.
  const int64_t state = 2 * Largest(Baseline(), "learner-0/parameters");
  const int64_t reference = Largest(Baseline(), "reference-0/reference_model");
  ASSERT_GT(state, 0);
  ASSERT_GT(reference, 0);
  std::map<std::string, int64_t> count, bytes;
  for (const json& m : Moves(run.dir)) {
    const std::string key = m["role"].get<std::string>() + "/" + m["object"].get<std::string>() +
                            "/" + m["direction"].get<std::string>();
    count[key] += 1;
    bytes[key] += m["bytes"].get<int64_t>();
    if (m["object"] == "optimizer_state") EXPECT_EQ(m["bytes"], state) << m.dump();
    if (m["object"] == "reference_model") EXPECT_EQ(m["bytes"], reference) << m.dump();
    EXPECT_GE(m["seconds"].get<double>(), 0);
  }
  // 30 SFT steps and 3 RL steps: each phase's state goes out after every
  // step and comes in before every step but its first.
  EXPECT_EQ(count["learner-0/optimizer_state/out"], 33);
  EXPECT_EQ(count["learner-0/optimizer_state/in"], 31);
  // Out after its load, in and out for each step's scoring.
  EXPECT_EQ(count["reference-0/reference_model/out"], 4);
  EXPECT_EQ(count["reference-0/reference_model/in"], 3);
  // Per step: the reference in and out for its scoring; the RL state out
  // after the update, and in before it from the second step on.
  ASSERT_EQ(run.steps.size(), 3u);
  for (size_t i = 0; i < run.steps.size(); ++i) {
    EXPECT_EQ(run.steps[i]["move_bytes"], (i == 0 ? 1 : 2) * state + 2 * reference)
        << run.steps[i].dump();
  }
  // The state is on the device only inside the optimizer step, after the
  // backward passes' peak: the learner's optimizer_state object (its size
  // at the update's peak) is 0, where the baseline keeps both phases'.
  EXPECT_EQ(Largest(run, "learner-0/optimizer_state"), 0);
  EXPECT_EQ(Largest(Baseline(), "learner-0/optimizer_state"), 2 * state);
  EXPECT_EQ(run.summary["moves"]["host_peak_bytes"], 2 * state + reference);

  // A resume from the first checkpoint restores the offloaded state and
  // ends where the straight run did.
  testing_util::WriteText(run.dir / "checkpoints" / "latest", "step_1\n");
  for (const char* later : {"step_2", "step_3"}) fs::remove_all(run.dir / "checkpoints" / later);
  fs::remove(run.dir / "policy.safetensors");
  std::ostringstream progress;
  const absl::Status resumed = run::ResumeEmbeddedJob(run.dir.string(), progress);
  ASSERT_TRUE(resumed.ok()) << resumed << "\n" << progress.str();
  EXPECT_TRUE(Slurp(run.dir / "policy.safetensors") == Slurp(Baseline().dir / "policy.safetensors"))
      << "resumed final weights differ";
}

TEST(OffloadTest, ColocatedTrainsTheSameAndRecordsTheActorsMoves) {
  v1::JobConfig job = BaseJob();
  job.mutable_deployment()->set_placement(v1::DeploymentConfig::COLOCATED);
  const JobRun run = RunTinyJob("offload_colocated", job);
  ExpectSameTraining(run);
  ExpectAttributed(run);
  PrintMoves("colocated", run);
  const int64_t weights = Largest(Baseline(), "actor-0/parameters");
  ASSERT_GT(weights, 0);
  int64_t actor_out = 0, actor_in = 0, reference = 0;
  for (const json& m : Moves(run.dir)) {
    if (m["role"] == "actor-0") {
      EXPECT_EQ(m["object"], "parameters");
      EXPECT_EQ(m["bytes"], weights) << m.dump();
      (m["direction"] == "out" ? actor_out : actor_in) += 1;
    }
    reference += m["object"] == "reference_model";
  }
  // Out after every Generate (each step's rollout, the evaluations), in
  // before the next call or weight sync.
  EXPECT_GE(actor_out, 3);
  EXPECT_GE(actor_in, actor_out - 1);
  EXPECT_EQ(reference, 7);
  for (const json& step : run.steps) EXPECT_GT(step["move_bytes"].get<int64_t>(), 0);
  // The actor's weights leave the device between its calls.
  EXPECT_EQ(run.summary["memory"]["lifetimes"]["actor-0/parameters"]["freed_step"].is_null(),
            false);
}

#ifdef TRELLIS_BINARY
TEST(OffloadTest, CompareShowsTheMovesLine) {
  v1::JobConfig job = BaseJob();
  job.mutable_memory()->set_offload_optimizer_state(true);
  const JobRun run = RunTinyJob("offload_compare", job);
  const fs::path log = fs::path(::testing::TempDir()) / "offload_compare.log";
  const int status = testing_util::Wait(
      testing_util::StartTrellis({"compare", Baseline().dir.string(), run.dir.string()}, log));
  const std::string out = Slurp(log);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("moves device<->host / step"), std::string::npos) << out;
  EXPECT_NE(out.find("memory.offload_optimizer_state"), std::string::npos) << out;
  std::cout << out;
}

// (role/object/direction) -> {count, bytes} of a run's move records.
std::map<std::string, std::pair<int64_t, int64_t>> MovesByKey(const fs::path& dir) {
  std::map<std::string, std::pair<int64_t, int64_t>> moves;
  for (const json& m : Moves(dir)) {
    auto& [count, bytes] =
        moves[m["role"].get<std::string>() + "/" + m["object"].get<std::string>() + "/" +
              m["direction"].get<std::string>()];
    count += 1;
    bytes += m["bytes"].get<int64_t>();
  }
  return moves;
}

// A launched run's workers forward their moves (LedgerReport's MoveRecord):
// its ledger.jsonl and summary hold the embedded run's moves, each with the
// worker's id as its role, the last of them too (the scheduler drains the
// workers before writing the summary).
TEST(OffloadTest, ALaunchedRunRecordsTheWorkersMovesAsTheEmbeddedRunDoes) {
  const fs::path root = fs::path(::testing::TempDir()) / "offload_launched";
  fs::remove_all(root);
  fs::create_directories(root);
  v1::JobConfig job = BaseJob();
  job.mutable_memory()->set_offload_optimizer_state(true);
  job.mutable_memory()->set_offload_frozen(true);
  testing_util::RunTrellis(root, "run", "embedded", job);
  testing_util::RunTrellis(root, "launch", "launched", job);

  const auto want = MovesByKey(root / "embedded");
  ASSERT_EQ(want.count("learner-0/optimizer_state/out"), 1u);
  ASSERT_EQ(want.count("reference-0/reference_model/in"), 1u);
  EXPECT_EQ(MovesByKey(root / "launched"), want);
  const json summary = json::parse(Slurp(root / "embedded" / "summary.json"));
  const json launched = json::parse(Slurp(root / "launched" / "summary.json"));
  EXPECT_EQ(launched["moves"]["count"], summary["moves"]["count"]);
  EXPECT_EQ(launched["moves"]["bytes"], summary["moves"]["bytes"]);
  for (const auto& [object, moved] : summary["moves"]["objects"].items()) {
    EXPECT_EQ(launched["moves"]["objects"][object]["bytes"], moved["bytes"]) << object;
  }
  // Which step records count them depends on when heartbeats named a new
  // step (ledger/README.md): a tiny job's steps are shorter than a
  // heartbeat interval, so most arrive only in the drain before the summary.
}
#endif

}  // namespace
}  // namespace trellis
