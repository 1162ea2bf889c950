// The asynchronous pipeline (job.async) against the synchronous loop on the
// default job, with a verifier as slow as the rollout: the bench registers
// a "slow_numeric" verifier kind (the built-in numeric verifier behind a
// sleep of --verify_ms per batch; a bench-only kind, not in the product).
// --verify_ms=0 (the default) first measures a synchronous step with the
// plain verifier and sleeps as long as its rollout took (--match=rollout,
// the default) or as long as the whole step took (--match=step: a verifier
// that doubles the synchronous step, as sandboxed code execution or a
// remote service does when the rollout is a small part of the step). Then
// it runs the
// job synchronously and with async.max_staleness 1 and 2, each for the same
// --steps (the same number of trained samples), and prints samples trained
// per second of RL steps (the SFT warm-up not counted) and the greedy
// held-out accuracy after the run, with each ratio to the synchronous run.
//
// With --trellis=build/trellis the same three runs are also launched
// (`trellis launch`, two actors), their verifier the same slow verifier:
// this process serves it over gRPC (trellis.v1.Verifier) and the launched
// job names it "remote", as a job names a verification service elsewhere.
// No run caches verdicts, so every sample costs the verifier its latency;
// the last two columns count the slow verifier's calls per step and their
// mean milliseconds, as it saw them (the same verifier in every run).
//
//   build/bench/async_bench [--steps=30] [--verify_ms=0] [--match=rollout|step]
//                           [--out=/tmp/async_bench] [--trellis=build/trellis]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/job_runs.h"
#include "config/job_config.h"
#include "roles/local_roles.h"
#include "rpc/server.h"
#include "run/embedded_job.h"
#include "verifier/verifier.h"
#include "verifier/verifier_service.h"

ABSL_FLAG(int, steps, 30, "GRPO steps of each run (the default job has 150)");
ABSL_FLAG(int, verify_ms, 0, "verifier latency per batch; 0: measured (--match)");
ABSL_FLAG(std::string, match, "rollout",
          "with --verify_ms=0, the latency is a measured synchronous step's \"rollout\" seconds "
          "or its whole \"step\" seconds");
ABSL_FLAG(std::string, out, "/tmp/async_bench", "directory for the runs");
ABSL_FLAG(std::string, trellis, "",
          "the trellis binary: also runs the three `trellis launch`ed with 2 actors, the verifier "
          "the same slow verifier, served by this process over gRPC");
ABSL_FLAG(bool, embedded, true, "run the three embedded runs (false: launched ones only)");

namespace trellis {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int g_verify_ms = 0;  // set before any run starts
// The slow verifier's calls and their seconds in the run going on.
std::atomic<int64_t> g_calls{0};
std::atomic<int64_t> g_call_micros{0};

// The numeric verifier, taking g_verify_ms per batch.
class SlowVerifier : public verifier::Verifier {
 public:
  explicit SlowVerifier(std::unique_ptr<verifier::Verifier> inner) : inner_(std::move(inner)) {}
  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    return inner_->Verify(item);
  }
  std::vector<v1::VerifyResult> VerifyBatch(
      const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items) const override {
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(g_verify_ms));
    std::vector<v1::VerifyResult> results = inner_->VerifyBatch(items);
    g_calls += 1;
    g_call_micros += std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    return results;
  }
  bool PrefersBatches() const override { return true; }

 private:
  std::unique_ptr<verifier::Verifier> inner_;
};

absl::Status RegisterSlowVerifier(verifier::VerifierRegistry& registry) {
  return registry.Register(
      "slow_numeric",
      [](const v1::VerifierConfig& config) -> absl::StatusOr<std::unique_ptr<verifier::Verifier>> {
        v1::VerifierConfig numeric = config;
        numeric.set_name("numeric");
        verifier::VerifierRegistry builtins;
        if (absl::Status s = verifier::RegisterBuiltinVerifiers(builtins); !s.ok()) return s;
        absl::StatusOr<std::unique_ptr<verifier::Verifier>> inner = builtins.Create(numeric);
        if (!inner.ok()) return inner.status();
        return std::make_unique<SlowVerifier>(*std::move(inner));
      });
}

struct Result {
  int64_t steps = 0;
  double rl_seconds = 0;
  int64_t trained = 0;  // samples in batches
  double rollout_seconds = 0;
  double accuracy = 0;
  double stale_fraction = 0;
};

// The run's figures from its ledger and summary.
Result Read(const fs::path& dir) {
  Result r;
  int64_t stale = 0;
  for (const json& rec : bench::StepRecords(dir)) {
    ++r.steps;
    r.rl_seconds += rec["step_seconds"].get<double>();
    r.rollout_seconds += rec["stage_seconds"]["rollout"].get<double>();
    const auto hist = rec["staleness"].get<std::vector<int64_t>>();
    for (size_t k = 0; k < hist.size(); ++k) {
      r.trained += hist[k];
      if (k > 0) stale += hist[k];
    }
  }
  std::ifstream summary_in(dir / "summary.json");
  const json summary = json::parse(summary_in);
  r.accuracy = summary["eval"]["after"]["accuracy"].get<double>();
  r.stale_fraction = r.trained > 0 ? static_cast<double>(stale) / r.trained : 0;
  return r;
}

Result Run(const v1::JobConfig& job, const fs::path& dir) {
  bench::RunJobOrExit(job, dir);
  return Read(dir);
}

Result Launch(const v1::JobConfig& job, const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir.parent_path());
  const fs::path yaml = dir.string() + ".yaml";
  std::ofstream(yaml) << config::ResolvedJobYaml(job);
  const std::string command =
      absl::StrCat(absl::GetFlag(FLAGS_trellis), " launch ", yaml.string(), " --out ", dir.string(),
                   " > ", dir.string(), ".log 2>&1");
  if (std::system(command.c_str()) != 0) {
    std::cerr << "failed: " << command << "\n";
    std::exit(1);
  }
  return Read(dir);
}

// The three runs of `base` (sync, staleness 1 and 2), one line each.
void Compare(const v1::JobConfig& base, const std::string& label,
             Result (*run)(const v1::JobConfig&, const fs::path&)) {
  Result sync;
  for (int staleness : {-1, 1, 2}) {
    v1::JobConfig job = base;
    const std::string name =
        label + (staleness < 0 ? "sync" : absl::StrFormat("async_s%d", staleness));
    if (staleness >= 0) {
      job.mutable_async()->set_enabled(true);
      job.mutable_async()->set_max_staleness(staleness);
    }
    g_calls = 0;
    g_call_micros = 0;
    const Result r = run(job, fs::path(absl::GetFlag(FLAGS_out)) / name);
    if (staleness < 0) sync = r;
    const double rate = r.trained / r.rl_seconds;
    // The calls of the whole run (the evaluations' too).
    const int64_t calls = std::max<int64_t>(1, g_calls);
    std::printf("%-22s %10.1f %12.1f %8.2fx %10.3f %+8.3f %6.0f%% %7.2f %8.0f\n", name.c_str(),
                r.rl_seconds, rate, rate / (sync.trained / sync.rl_seconds), r.accuracy,
                r.accuracy - sync.accuracy, 100 * r.stale_fraction,
                static_cast<double>(g_calls) / std::max<int64_t>(1, r.steps),
                1e-3 * static_cast<double>(g_call_micros) / calls);
    std::fflush(stdout);
  }
}

int Main() {
  roles::AddVerifierKinds(RegisterSlowVerifier);
  absl::StatusOr<v1::JobConfig> base = run::DefaultJob();
  if (!base.ok()) {
    std::cerr << base.status() << "\n";
    return 1;
  }
  const int steps = absl::GetFlag(FLAGS_steps);
  const fs::path out = absl::GetFlag(FLAGS_out);
  base->mutable_grpo()->set_steps(steps);
  base->mutable_verifier()->set_name("slow_numeric");
  // No verdict cache: every call costs the verifier its latency, in every
  // run alike (a quarter of the default job's samples repeat a response; a
  // verifier whose cost is per item would skip them, and an earlier
  // launched verifier, a plugin sleeping per item, did).
  base->mutable_verifier()->set_cache_entries(0);
  g_verify_ms = absl::GetFlag(FLAGS_verify_ms);
  const std::string match = absl::GetFlag(FLAGS_match);
  if (match != "rollout" && match != "step") {
    std::cerr << "--match: \"" << match << "\" is neither \"rollout\" nor \"step\"\n";
    return 2;
  }
  if (g_verify_ms == 0) {
    v1::JobConfig probe = *base;
    probe.mutable_grpo()->set_steps(3);
    const Result r = Run(probe, out / "probe");
    const double seconds = match == "rollout" ? r.rollout_seconds : r.rl_seconds;
    g_verify_ms = static_cast<int>(1000 * seconds / r.steps);
    std::printf("a synchronous step with the plain verifier: rollout %.0f ms, step %.0f ms\n",
                1000 * r.rollout_seconds / r.steps, 1000 * r.rl_seconds / r.steps);
  }
  std::printf("default job, %d GRPO steps, verifier latency %d ms per batch\n", steps, g_verify_ms);
  std::printf("%-22s %10s %12s %9s %10s %9s %7s %7s %8s\n", "run", "RL s", "samples/s", "speedup",
              "accuracy", "vs sync", "stale", "calls", "ms/call");
  if (absl::GetFlag(FLAGS_embedded)) Compare(*base, "", Run);
  if (!absl::GetFlag(FLAGS_trellis).empty()) {
    verifier::VerifierRegistry registry;
    absl::StatusOr<std::unique_ptr<verifier::Verifier>> slow =
        RegisterSlowVerifier(registry).ok() ? registry.Create(base->verifier())
                                            : absl::InternalError("registering slow_numeric");
    if (!slow.ok()) {
      std::cerr << slow.status() << "\n";
      return 1;
    }
    const std::unique_ptr<v1::Verifier::Service> service =
        verifier::NewVerifierService(std::shared_ptr<const verifier::Verifier>(*std::move(slow)));
    absl::StatusOr<std::unique_ptr<rpc::Server>> server =
        rpc::Server::Start("127.0.0.1:0", {service.get()});
    if (!server.ok()) {
      std::cerr << server.status() << "\n";
      return 1;
    }
    (*server)->SetServing(true);
    v1::JobConfig launched = *base;
    launched.mutable_deployment()->mutable_actor()->set_count(2);
    launched.mutable_verifier()->set_name("remote");
    launched.mutable_verifier()->set_address((*server)->address());
    Compare(launched, "launched_", Launch);
  }
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return trellis::Main();
}
