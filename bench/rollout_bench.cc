// The rollout engine (actor/internal/engine.h) on the default job's rollout:
// the real policy shape, 32 prompts x 8 responses of at most 6 tokens, the
// job's sampling, one thread (runtime.num_threads). The old engine (prefix
// sharing and continuous batching off: every row prefills its prompt, and
// every row decodes until the longest ends) beside the new one, and each
// option alone. Prints per mode the positions each stage computed (padding
// and finished rows included), its GFLOP and seconds (median over --reps),
// each stage's GFLOP/s as a share of the measured matrix-product peak, and
// the old/new ratios. The samples of every mode must be the old engine's.
//
//   rollout_bench [--policy=RUN/policy.safetensors] [--reps=7] [--budget=0]
//
// Response lengths decide how much continuous batching saves, so give a
// trained policy (--policy: a default-job run's policy.safetensors);
// without one the job's initial weights sample (nearly random, long)
// responses.
//
// Then multi-turn: the prompts as episodes (one response each) for up to 3
// turns, a digit ending a turn and " ok " observed after it; each turn
// prefilled with the turn cache (actor/internal/turn_cache.h) and without.
// Prints per turn the prompt tokens prefilled either way and whether the
// samples agree.

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "actor/internal/engine.h"
#include "actor/internal/turn_cache.h"
#include "bench/default_rollout.h"
#include "config/flops.h"
#include "loop/prompt_format.h"
#include "loop/recipe.h"
#include "model/matmul_rate.h"
#include "model/policy.h"
#include "model/safetensors.h"
#include "run/embedded_job.h"
#include "run/job_runner.h"

ABSL_FLAG(std::string, policy, "", "policy.safetensors of a default-job run (default: initial)");
ABSL_FLAG(int, reps, 7, "timed repetitions per mode (after one warm-up)");
ABSL_FLAG(int64_t, budget, 0, "decode_token_budget of the new engine (0: no limit)");

namespace trellis {
namespace {

using actor::internal::EngineOptions;
using actor::internal::EngineResult;
using actor::internal::StageWork;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

struct Measured {
  EngineResult result;         // of the last repetition
  double prefill_seconds = 0;  // medians
  double decode_seconds = 0;
  double seconds = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Measured Measure(model::TransformerImpl& policy, const v1::GenerateRequest& request, int32_t pad,
                 const text::Tokenizer& tokenizer, const EngineOptions& options, int reps) {
  actor::internal::EngineCallbacks callbacks;
  callbacks.is_eos = [&tokenizer](int32_t t) { return tokenizer.IsEos(t); };
  Measured m;
  std::vector<double> prefill, decode, total;
  for (int rep = 0; rep <= reps; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<EngineResult> r =
        actor::internal::RunEngine(policy, request, pad, options, callbacks);
    const double seconds = Seconds(start);
    if (!r.ok()) {
      std::fprintf(stderr, "rollout_bench: %s\n", std::string(r.status().message()).c_str());
      std::exit(1);
    }
    if (rep == 0) continue;  // warm-up
    prefill.push_back(r->prefill.seconds);
    decode.push_back(r->decode.seconds);
    total.push_back(seconds);
    m.result = *std::move(r);
  }
  m.prefill_seconds = Median(prefill);
  m.decode_seconds = Median(decode);
  m.seconds = Median(total);
  return m;
}

bool SameTokens(const EngineResult& a, const EngineResult& b) {
  if (a.rows.size() != b.rows.size()) return false;
  for (size_t r = 0; r < a.rows.size(); ++r) {
    if (a.rows[r].tokens != b.rows[r].tokens) return false;
  }
  return true;
}

// The next turn of every row of `request` that ended on a stop: its prompt,
// tokens and `observation`, while the turn still fits `max_seq_len`.
v1::GenerateRequest NextTurn(const v1::GenerateRequest& request, const EngineResult& result,
                             const std::vector<int32_t>& observation, int64_t max_seq_len) {
  v1::GenerateRequest next = request;
  next.clear_prompts();
  next.set_seed(request.seed() + 1);
  for (int i = 0; i < request.prompts_size(); ++i) {
    const actor::internal::EngineRow& row = result.rows[i];
    if (row.stop_index == 0) continue;
    v1::Prompt prompt = request.prompts(i);
    prompt.mutable_token_ids()->Add(row.tokens.begin(), row.tokens.end());
    prompt.mutable_token_ids()->Add(observation.begin(), observation.end());
    if (prompt.token_ids_size() + request.sampling().max_new_tokens() > max_seq_len) continue;
    *next.add_prompts() = std::move(prompt);
  }
  return next;
}

// Multi-turn episodes with and without the turn cache.
void MultiTurn(model::TransformerImpl& policy, v1::GenerateRequest request,
               const text::Tokenizer& tokenizer, int64_t max_seq_len) {
  request.set_responses_per_prompt(1);
  for (char digit = '0'; digit <= '9'; ++digit) {
    absl::StatusOr<std::vector<int32_t>> stop = tokenizer.Encode(std::string(1, digit));
    if (stop.ok() && !stop->empty()) {
      request.mutable_sampling()->add_stop()->mutable_token_ids()->Add(stop->begin(), stop->end());
    }
  }
  absl::StatusOr<std::vector<int32_t>> observation = tokenizer.Encode(" ok ");
  if (!observation.ok()) return;
  actor::internal::EngineCallbacks callbacks;
  callbacks.is_eos = [&tokenizer](int32_t t) { return tokenizer.IsEos(t); };
  actor::internal::TurnCache turns(int64_t{1} << 30);
  std::printf("\nmulti-turn: %d episodes, a digit ends a turn, \" ok \" observed after it\n",
              request.prompts_size());
  std::printf("%-5s %8s %16s %16s %14s %5s\n", "turn", "episodes", "prefilled (full)",
              "prefilled (turn", "reused from", "same");
  std::printf("%-5s %8s %16s %16s %14s %5s\n", "", "", "", "cache)", "turn cache", "");
  int64_t full_total = 0, cached_total = 0;
  for (int turn = 0; turn < 3 && request.prompts_size() > 0; ++turn) {
    absl::StatusOr<EngineResult> full =
        actor::internal::RunEngine(policy, request, tokenizer.pad_id(), {}, callbacks);
    absl::StatusOr<EngineResult> cached =
        actor::internal::RunEngine(policy, request, tokenizer.pad_id(), {}, callbacks, &turns);
    if (!full.ok() || !cached.ok()) return;
    std::printf("%-5d %8d %16lld %16lld %14lld %5s\n", turn, request.prompts_size(),
                static_cast<long long>(full->prefill_tokens),
                static_cast<long long>(cached->prefill_tokens),
                static_cast<long long>(cached->reused_tokens),
                SameTokens(*full, *cached) ? "yes" : "NO");
    full_total += full->prefill_tokens;
    cached_total += cached->prefill_tokens;
    request = NextTurn(request, *cached, *observation, max_seq_len);
  }
  std::printf("prefilled over the turns: %lld without the turn cache, %lld with it\n",
              static_cast<long long>(full_total), static_cast<long long>(cached_total));
}

int Main() {
  absl::StatusOr<v1::JobConfig> job = run::DefaultJob();
  absl::Status prepared = job.ok() ? loop::PrepareJob(&*job) : job.status();
  absl::StatusOr<std::unique_ptr<loop::PromptFormat>> format =
      prepared.ok() ? loop::PromptFormat::ForJob(*job)
                    : absl::StatusOr<std::unique_ptr<loop::PromptFormat>>(prepared);
  absl::StatusOr<data::Split> split =
      format.ok() ? run::LoadJobData(*job) : absl::StatusOr<data::Split>(format.status());
  if (!split.ok()) {
    std::fprintf(stderr, "rollout_bench: %s\n", std::string(split.status().message()).c_str());
    return 1;
  }
  const text::Tokenizer& tokenizer = (*format)->tokenizer();
  torch::set_num_threads(job->runtime().num_threads());
  absl::StatusOr<model::Transformer> policy = model::NewPolicy(
      job->model(), v1::LoraConfig(), tokenizer.vocab_size(), job->runtime().seed());
  if (policy.ok() && !absl::GetFlag(FLAGS_policy).empty()) {
    absl::StatusOr<model::NamedTensors> weights =
        model::LoadSafetensors(absl::GetFlag(FLAGS_policy));
    absl::Status loaded = weights.ok() ? (*policy)->LoadWeights(*weights) : weights.status();
    if (!loaded.ok()) policy = loaded;
  }
  if (!policy.ok()) {
    std::fprintf(stderr, "rollout_bench: %s\n", std::string(policy.status().message()).c_str());
    return 1;
  }
  torch::NoGradGuard no_grad;
  (*policy)->eval();

  absl::StatusOr<v1::GenerateRequest> made =
      bench::RolloutRequest(*job, **format, *split, job->grpo().prompts_per_step());
  if (!made.ok()) return 1;
  const v1::GenerateRequest request = *std::move(made);

  const v1::ModelConfig& c = job->model();
  const double peak = model::MeasureMatmulPeak() / 1e9;
  // Each stage's counted work priced as the ledger prices the actor's.
  const auto gflop = [&](const StageWork& w) {
    return config::ForwardFlopsOfWork(job->model(), (*policy)->vocab_size(), w.positions,
                                      w.attention_pairs) /
           1e9;
  };
  std::printf(
      "rollout_bench: the default job's rollout: %d prompts x %d responses, max_new_tokens %d, "
      "policy d_model %d, %d layers, d_ff %d, vocab %lld (%s), %d thread(s), median of %d\n",
      request.prompts_size(), request.responses_per_prompt(), request.sampling().max_new_tokens(),
      c.d_model(), c.n_layers(), c.d_ff(), static_cast<long long>(tokenizer.vocab_size()),
      absl::GetFlag(FLAGS_policy).empty() ? "initial weights" : absl::GetFlag(FLAGS_policy).c_str(),
      job->runtime().num_threads(), absl::GetFlag(FLAGS_reps));
  std::printf("matrix-product peak: %.2f GFLOP/s (float32 square product, model/matmul_rate.h)\n\n", peak);

  struct Mode {
    const char* name;
    EngineOptions options;
  };
  std::vector<Mode> modes = {{"old (both off)", {false, false, 0}},
                             {"shared prefix", {true, false, 0}},
                             {"continuous", {false, true, absl::GetFlag(FLAGS_budget)}},
                             {"new (both on)", {true, true, absl::GetFlag(FLAGS_budget)}}};
  std::printf("%-15s %9s %9s %9s %8s %8s %8s %8s %16s %16s %5s\n", "engine", "prefill", "decode",
              "positions", "GFLOP", "prefill", "decode", "total", "prefill GFLOP/s",
              "decode GFLOP/s", "same");
  std::printf("%-15s %9s %9s %9s %8s %8s %8s %8s %16s %16s %5s\n", "", "positions", "positions", "",
              "", "s", "s", "s", "(% of peak)", "(% of peak)", "");
  std::vector<Measured> measured;
  for (const Mode& mode : modes) {
    measured.push_back(Measure(**policy, request, tokenizer.pad_id(), tokenizer, mode.options,
                               absl::GetFlag(FLAGS_reps)));
    const Measured& m = measured.back();
    const EngineResult& r = m.result;
    const double pf = gflop(r.prefill), df = gflop(r.decode);
    std::printf(
        "%-15s %9lld %9lld %9lld %8.3f %8.4f %8.4f %8.4f %8.2f (%4.1f%%) %8.2f (%4.1f%%) %5s\n",
        mode.name, static_cast<long long>(r.prefill.positions),
        static_cast<long long>(r.decode.positions),
        static_cast<long long>(r.prefill.positions + r.decode.positions), pf + df,
        m.prefill_seconds, m.decode_seconds, m.seconds, pf / m.prefill_seconds,
        100 * pf / m.prefill_seconds / peak, df / m.decode_seconds,
        100 * df / m.decode_seconds / peak, SameTokens(r, measured[0].result) ? "yes" : "NO");
  }
  const EngineResult& old = measured.front().result;
  const EngineResult& now = measured.back().result;
  const double old_gflop = gflop(old.prefill) + gflop(old.decode);
  const double new_gflop = gflop(now.prefill) + gflop(now.decode);
  std::printf(
      "\nold/new: arithmetic %.2fx (%.3f -> %.3f GFLOP; positions %lld -> %lld), time %.2fx "
      "(%.4f -> %.4f s)\n",
      old_gflop / new_gflop, old_gflop, new_gflop,
      static_cast<long long>(old.prefill.positions + old.decode.positions),
      static_cast<long long>(now.prefill.positions + now.decode.positions),
      measured.front().seconds / measured.back().seconds, measured.front().seconds,
      measured.back().seconds);
  std::printf(
      "live tokens: %lld prompt tokens prefilled (new), %lld response tokens (%.2f per "
      "response)\n",
      static_cast<long long>(now.prefill_tokens), static_cast<long long>(now.generated_tokens),
      static_cast<double>(now.generated_tokens) / now.rows.size());
  MultiTurn(**policy, request, tokenizer, c.max_seq_len());
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return trellis::Main();
}
