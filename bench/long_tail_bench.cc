// Partial rollout (job.async.partial_rollout) on a long tail: the job of
// examples/jobs/long_tail_grpo.yaml, whose data give a tenth of the
// training prompts responses ten times as long as the others
// (min_new_tokens), run asynchronously three ways one after the other:
// every response finishing on the weights it started with (finish), the
// unfinished ones going on in the next step on the new weights (continue),
// and the unfinished ones started afresh (requeue). Each line: seconds of
// RL steps (the SFT warm-up not counted), steps per second and its ratio
// to finish, rollout seconds per step, greedy held-out accuracy after the
// run and its difference to finish, the trained tokens' mean staleness
// (versions between the token's policy and the update) and the largest,
// the mean fraction of importance weights truncated, and the groups the
// rollouts carried over and restarted.
//
// --decode_ms=D > 0 makes every decode step of the actor take at least D
// milliseconds (it waits out the rest; the learner has the CPU meanwhile),
// as on an accelerator, where decoding is bound by reading the weights and
// a step of a few rows costs what a full one does: the regime the long
// tail hurts. 0 (the default): the CPU's own steps, where a step of a few
// rows costs a fraction of a full one.
//
//   build/bench/long_tail_bench [--job=examples/jobs/long_tail_grpo.yaml]
//                               [--steps=40] [--decode_ms=0] [--out=/tmp/long_tail_bench]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "bench/job_runs.h"
#include "config/job_config.h"
#include "run/embedded_job.h"

ABSL_FLAG(std::string, job, "examples/jobs/long_tail_grpo.yaml", "the long-tail job");
ABSL_FLAG(int, steps, 0, "GRPO steps of each run (0: the job's)");
ABSL_FLAG(std::string, out, "/tmp/long_tail_bench", "directory for the runs");
ABSL_FLAG(int, decode_ms, 0, "least milliseconds of an actor decode step (0: as computed)");

namespace trellis {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Result {
  int64_t steps = 0;
  double rl_seconds = 0;
  double rollout_seconds = 0;
  double accuracy = 0;
  int64_t tokens = 0;
  double lag_sum = 0;
  size_t largest_lag = 0;
  double truncated = 0;
  int64_t carried = 0;
  int64_t restarted = 0;
};

Result Read(const fs::path& dir) {
  Result r;
  for (const json& rec : bench::StepRecords(dir)) {
    ++r.steps;
    r.rl_seconds += rec["step_seconds"].get<double>();
    r.rollout_seconds += rec["stage_seconds"]["rollout"].get<double>();
    r.truncated += rec["importance_weight_truncated"].get<double>();
    r.carried += rec["rollout_groups_carried"].get<int64_t>();
    r.restarted += rec["rollout_groups_restarted"].get<int64_t>();
    const auto lags = rec["token_staleness"].get<std::vector<int64_t>>();
    for (size_t k = 0; k < lags.size(); ++k) {
      r.tokens += lags[k];
      r.lag_sum += static_cast<double>(k * lags[k]);
      if (lags[k] > 0) r.largest_lag = std::max(r.largest_lag, k);
    }
  }
  std::ifstream summary_in(dir / "summary.json");
  r.accuracy = json::parse(summary_in)["eval"]["after"]["accuracy"].get<double>();
  return r;
}

// The actor, each decode step taking at least `pace` (the step's stop
// check, polled before each decode forward, waits out the rest).
class PacedActor final : public actor::RolloutWorker {
 public:
  PacedActor(actor::RolloutWorker* inner, std::chrono::milliseconds pace)
      : inner_(inner), pace_(pace) {}
  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request) override {
    next_ = std::chrono::steady_clock::now();
    return inner_->GenerateUntil(request, [this] {
      std::this_thread::sleep_until(next_);
      next_ = std::max(next_, std::chrono::steady_clock::now()) + pace_;
      return false;
    });
  }
  absl::StatusOr<v1::WeightSyncStats> SyncWeights(int64_t version) override {
    return inner_->SyncWeights(version);
  }
  int64_t policy_version() const override { return inner_->policy_version(); }

 private:
  actor::RolloutWorker* inner_;
  const std::chrono::milliseconds pace_;
  std::chrono::steady_clock::time_point next_;
};

// The embedded roles with the actor paced.
class PacedRoles final : public run::RoleSet {
 public:
  PacedRoles(std::unique_ptr<run::RoleSet> inner, std::chrono::milliseconds pace)
      : inner_(std::move(inner)), actor_(inner_->roles().actor, pace) {}
  loop::Roles roles() override {
    loop::Roles roles = inner_->roles();
    roles.actor = &actor_;
    return roles;
  }
  absl::Status Restore(const run::Checkpoint& checkpoint) override {
    return inner_->Restore(checkpoint);
  }

 private:
  std::unique_ptr<run::RoleSet> inner_;
  PacedActor actor_;
};

Result Run(const v1::JobConfig& job, const fs::path& dir) {
  const std::chrono::milliseconds pace(absl::GetFlag(FLAGS_decode_ms));
  const run::RoleBinder bind =
      [pace](const v1::JobConfig& j, const text::Tokenizer* tokenizer,
             ledger::Ledger* ledger) -> absl::StatusOr<std::unique_ptr<run::RoleSet>> {
    absl::StatusOr<std::unique_ptr<run::RoleSet>> roles = run::BindLocalRoles(j, tokenizer, ledger);
    if (!roles.ok()) return roles.status();
    return std::make_unique<PacedRoles>(*std::move(roles), pace);
  };
  bench::RunJobOrExit(job, dir, bind);
  return Read(dir);
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  using namespace trellis;
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<v1::JobConfig> loaded = config::LoadJobFile(absl::GetFlag(FLAGS_job));
  if (!loaded.ok()) {
    std::cerr << loaded.status() << "\n";
    return 1;
  }
  if (absl::GetFlag(FLAGS_steps) > 0) loaded->mutable_grpo()->set_steps(absl::GetFlag(FLAGS_steps));
  std::printf("%-9s %9s %8s %7s %10s %8s %7s %8s %9s %9s %8s %9s\n", "partial", "rl_s",
              "steps/s", "ratio", "rollout/st", "heldout", "delta", "lag", "lag_max", "truncated",
              "carried", "restarted");
  Result finish;
  for (const v1::AsyncConfig::PartialRollout mode :
       {v1::AsyncConfig::FINISH, v1::AsyncConfig::CONTINUE, v1::AsyncConfig::REQUEUE}) {
    v1::JobConfig job = *loaded;
    job.mutable_async()->set_enabled(true);
    job.mutable_async()->set_partial_rollout(mode);
    const std::string name = absl::AsciiStrToLower(v1::AsyncConfig::PartialRollout_Name(mode));
    const Result r = Run(job, fs::path(absl::GetFlag(FLAGS_out)) / name);
    if (mode == v1::AsyncConfig::FINISH) finish = r;
    const double rate = r.steps / r.rl_seconds;
    std::printf("%-9s %9.1f %8.3f %6.2fx %10.3f %8.3f %+7.3f %8.2f %9zu %9.4f %8lld %9lld\n",
                name.c_str(), r.rl_seconds, rate, rate / (finish.steps / finish.rl_seconds),
                r.rollout_seconds / r.steps, r.accuracy, r.accuracy - finish.accuracy,
                r.tokens > 0 ? r.lag_sum / r.tokens : 0.0, r.largest_lag, r.truncated / r.steps,
                static_cast<long long>(r.carried), static_cast<long long>(r.restarted));
    std::fflush(stdout);
  }
  return 0;
}
