// sampling.concurrency auto against fixed decode batch bounds, for one
// actor (actor/local_actor.h) of the default job's model: the default job's
// rollout request (its training prompts x responses, its sampling), the
// same seed every time so that every request samples the same tokens.
// First each fixed bound (GenerateRequest.decode_token_budget; 0: every
// row at once) for --reps requests: median decode tokens/s (generated
// tokens / GenerateResponse.decode_seconds) and request seconds. Then
// --steps requests under a ConcurrencyController
// (scheduler/concurrency_controller.h) fed by the actor's own responses,
// as the actor pool feeds it each step: the bound it chose per request and
// the tokens/s it got, and where it settled.
//
//   concurrency_bench [--policy=RUN/policy.safetensors] [--reps=3] [--steps=24]
//                     [--prompts=0]

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "actor/local_actor.h"
#include "bench/default_rollout.h"
#include "loop/prompt_format.h"
#include "loop/recipe.h"
#include "model/policy.h"
#include "model/safetensors.h"
#include "run/embedded_job.h"
#include "run/job_runner.h"
#include "scheduler/concurrency_controller.h"
#include "weightsync/inprocess_transport.h"

ABSL_FLAG(std::string, policy, "", "policy.safetensors of a default-job run (default: initial)");
ABSL_FLAG(int, reps, 3, "timed requests per fixed bound (after one warm-up)");
ABSL_FLAG(int, steps, 24, "requests under the controller");
ABSL_FLAG(int, prompts, 0, "prompts per request (0: the default job's prompts_per_step)");

namespace trellis {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "concurrency_bench: %s\n", std::string(s.message()).c_str());
  return 1;
}

struct Answer {
  v1::GenerateResponse response;
  double seconds = 0;  // the whole request, prefill included
};

absl::StatusOr<Answer> Ask(actor::RolloutWorker& actor, v1::GenerateRequest request,
                           int64_t budget) {
  request.set_decode_token_budget(static_cast<int32_t>(budget));
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::GenerateResponse> response = actor.Generate(request);
  if (!response.ok()) return response.status();
  return Answer{*std::move(response),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

double TokensPerSecond(const v1::GenerateResponse& r) {
  return r.decode_seconds() > 0 ? static_cast<double>(r.generated_tokens()) / r.decode_seconds()
                                : 0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main() {
  absl::StatusOr<v1::JobConfig> job = run::DefaultJob();
  absl::Status prepared = job.ok() ? loop::PrepareJob(&*job) : job.status();
  if (!prepared.ok()) return Fail(prepared);
  absl::StatusOr<std::unique_ptr<loop::PromptFormat>> format = loop::PromptFormat::ForJob(*job);
  if (!format.ok()) return Fail(format.status());
  absl::StatusOr<data::Split> split = run::LoadJobData(*job);
  if (!split.ok()) return Fail(split.status());
  const text::Tokenizer& tokenizer = (*format)->tokenizer();
  torch::set_num_threads(job->runtime().num_threads());
  absl::StatusOr<model::Transformer> policy = model::NewPolicy(
      job->model(), v1::LoraConfig(), tokenizer.vocab_size(), job->runtime().seed());
  if (!policy.ok()) return Fail(policy.status());
  if (!absl::GetFlag(FLAGS_policy).empty()) {
    absl::StatusOr<model::NamedTensors> weights =
        model::LoadSafetensors(absl::GetFlag(FLAGS_policy));
    if (!weights.ok()) return Fail(weights.status());
    if (absl::Status s = (*policy)->LoadWeights(*weights); !s.ok()) return Fail(s);
  }
  // The actor receives the weights as a launched actor does, in process.
  std::unique_ptr<weightsync::InProcessPublisher> publisher = weightsync::NewInProcessPublisher();
  std::unique_ptr<weightsync::Receiver> receiver = publisher->NewReceiver();
  if (absl::StatusOr<v1::WeightSyncStats> s = publisher->Publish(0, (*policy)->NamedWeights());
      !s.ok()) {
    return Fail(s.status());
  }
  absl::StatusOr<std::unique_ptr<actor::RolloutWorker>> actor =
      actor::NewLocalActor(job->model(), &tokenizer, receiver.get(), nullptr, {});
  if (!actor.ok()) return Fail(actor.status());
  if (absl::StatusOr<v1::WeightSyncStats> s = (*actor)->SyncWeights(0); !s.ok()) {
    return Fail(s.status());
  }

  const int prompts = absl::GetFlag(FLAGS_prompts) > 0 ? absl::GetFlag(FLAGS_prompts)
                                                       : job->grpo().prompts_per_step();
  absl::StatusOr<v1::GenerateRequest> made = bench::RolloutRequest(*job, **format, *split, prompts);
  if (!made.ok()) return Fail(made.status());
  const v1::GenerateRequest request = *std::move(made);
  const int64_t rows = static_cast<int64_t>(prompts) * request.responses_per_prompt();
  const v1::ModelConfig& c = job->model();
  std::printf(
      "concurrency_bench: one actor, %d prompts x %d responses (%lld rows), max_new_tokens %d, "
      "policy d_model %d, %d layers (%s), %d thread(s)\n\n",
      prompts, request.responses_per_prompt(), static_cast<long long>(rows),
      request.sampling().max_new_tokens(), c.d_model(), c.n_layers(),
      absl::GetFlag(FLAGS_policy).empty() ? "initial weights" : absl::GetFlag(FLAGS_policy).c_str(),
      job->runtime().num_threads());

  std::printf("%-10s %10s %14s %12s\n", "fixed", "tokens", "decode tok/s", "request s");
  std::vector<int64_t> budgets = {0};
  for (int64_t b = 1; b < rows; b *= 2) budgets.push_back(b);
  budgets.push_back(rows);
  for (int64_t budget : budgets) {
    std::vector<double> rates, seconds;
    int64_t tokens = 0;
    for (int rep = 0; rep <= absl::GetFlag(FLAGS_reps); ++rep) {
      absl::StatusOr<Answer> a = Ask(**actor, request, budget);
      if (!a.ok()) return Fail(a.status());
      if (rep == 0) continue;  // warm-up
      rates.push_back(TokensPerSecond(a->response));
      seconds.push_back(a->seconds);
      tokens = a->response.generated_tokens();
    }
    std::printf("%-10s %10lld %14.0f %12.4f\n",
                budget == 0 ? "all rows" : std::to_string(budget).c_str(),
                static_cast<long long>(tokens), Median(rates), Median(seconds));
  }

  std::printf("\n%-8s %8s %14s %12s\n", "auto", "bound", "decode tok/s", "request s");
  scheduler::ConcurrencyController controller{scheduler::ConcurrencyOptions{}};
  std::vector<double> last_rates;
  for (int step = 0; step < absl::GetFlag(FLAGS_steps); ++step) {
    absl::StatusOr<Answer> a = Ask(**actor, request, controller.Budget(rows));
    if (!a.ok()) return Fail(a.status());
    const v1::GenerateResponse& r = a->response;
    controller.Observe({r.decode_token_budget(), rows, r.generated_tokens(), r.decode_seconds()});
    std::printf("%-8d %8d %14.0f %12.4f\n", step, r.decode_token_budget(), TokensPerSecond(r),
                a->seconds);
    last_rates.push_back(TokensPerSecond(r));
  }
  const size_t tail = std::min<size_t>(8, last_rates.size());
  std::printf("settled on %lld rows; median decode tok/s of the last %zu requests: %.0f\n",
              static_cast<long long>(controller.settled_budget()), tail,
              Median(std::vector<double>(last_rates.end() - static_cast<std::ptrdiff_t>(tail),
                                         last_rates.end())));
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return trellis::Main();
}
