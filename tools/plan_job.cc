#include "tools/plan_job.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actor/sampling.h"
#include "config/flops.h"
#include "loop/prompt_format.h"
#include "loop/recipe.h"
#include "model/matmul_rate.h"
#include "model/transformer.h"
#include "model/token_ids.h"
#include "run/job_runner.h"
#include "roles/local_roles.h"

namespace trellis::tools {
namespace {

// Timed calls per measurement (the fastest counts).
constexpr int kReps = 3;
// The calibration's bounds, so a plan answers in seconds at any model size:
// the job's model at 1 and kCalibrationLayers transformer layers (every
// layer costs the same; the embedding and head keep their full size), and
// batches cut to at most this much arithmetic per timed call at the deeper
// cut (a few tenths of a second at a CPU's matrix-product rate).
constexpr int32_t kCalibrationLayers = 4;
constexpr double kCalibrationFlops = 3.2e10;
// Neither share of a pass (the layers', the rest's) is taken below this
// fraction of the deeper call: timing noise can make a difference <= 0.
constexpr double kMinShare = 0.05;

// Rows of a batch at `flops_per_row` that fit the calibration's budget.
int64_t CalibrationRows(int64_t rows, double flops_per_row) {
  const auto fit = static_cast<int64_t>(kCalibrationFlops / std::max(flops_per_row, 1.0));
  return std::clamp<int64_t>(fit, 1, rows);
}

// The shapes timed, the same at both depths.
struct Calibration {
  int64_t rows = 0;      // an update micro-batch
  int64_t samples = 0;   // the reference pass
  int64_t decoding = 0;  // the decode step: every sample, one token each
  int64_t seq = 0;
  int64_t prompt = 0, max_new = 0;
};

// The calls timed on the job's model (random weights, its memory
// strategies) cut to some layers: an update micro-batch forward and
// backward, one optimizer step (after a backward), the reference pass, and
// one decode step with sampling. They share the model and inputs.
struct Passes {
  std::function<void()> train, optimizer, forward, decode;
};

Passes MakePasses(const v1::JobConfig& job, const tools::PlanWorkload& w, const Calibration& c,
                  int32_t layers) {
  struct State {
    model::Transformer model{nullptr};
    std::unique_ptr<torch::optim::AdamW> optimizer;
    torch::Tensor batch, all, all_positions, all_valid;
    model::KVCache cache;
    torch::Tensor token, position, key_valid, uniforms;
    v1::SamplingParams params;
  };
  auto st = std::make_shared<State>();
  v1::ModelConfig m = job.model();
  m.set_n_layers(layers);
  torch::manual_seed(1);
  st->model =
      model::Transformer(m, w.vocab_size, model::Head::kLanguageModel, job.memory().lora());
  st->model->ApplyMemoryConfig(job.memory());
  std::vector<torch::Tensor> trained;
  for (const torch::Tensor& p : st->model->parameters()) {
    if (p.requires_grad()) trained.push_back(p);
  }
  st->optimizer = std::make_unique<torch::optim::AdamW>(trained);
  st->batch = torch::randint(w.vocab_size, {c.rows, c.seq}, torch::kLong);
  // Padded batches, as the roles run them: positions and a key mask.
  st->all = torch::randint(w.vocab_size, {c.samples, c.seq}, torch::kLong);
  st->all_positions = torch::arange(c.seq).unsqueeze(0).expand({c.samples, c.seq}).contiguous();
  st->all_valid = torch::ones({c.samples, c.seq}, torch::kBool);
  // A cache at the response's middle (its contents do not change the
  // arithmetic); each decode step takes one token per sample at that
  // position and samples the next.
  const int64_t context = c.prompt + c.max_new / 2;
  st->cache = st->model->NewCache(c.decoding, c.prompt + c.max_new);
  st->token = torch::randint(w.vocab_size, {c.decoding, 1}, torch::kLong);
  st->position = torch::full({c.decoding, 1}, context, torch::kLong);
  st->key_valid = torch::ones({c.decoding, context + 1}, torch::kBool);
  st->uniforms = torch::rand({c.decoding}, torch::kFloat64);
  st->params.set_temperature(job.sampling().temperature());
  st->params.set_top_p(job.sampling().top_p());
  Passes p;
  p.train = [st] {
    const torch::Tensor logp = torch::log_softmax(st->model->forward(st->batch), -1);
    logp.gather(-1, st->batch.unsqueeze(-1)).sum().backward();
  };
  p.optimizer = [st] { st->optimizer->step(); };
  p.forward = [st] {
    torch::NoGradGuard no_grad;
    torch::log_softmax(st->model->forward(st->all, st->all_positions, st->all_valid), -1);
  };
  p.decode = [st, context] {
    torch::NoGradGuard no_grad;
    st->cache.length = context;
    const torch::Tensor logits =
        st->model->forward(st->token, st->position, st->key_valid, &st->cache).select(1, 0);
    actor::SampleNext(logits, st->params, st->uniforms);
  };
  return p;
}

// The fastest of kReps calls of each of `shallow` and `deep`, their calls
// alternating so a busy moment of the machine slows both alike.
std::pair<double, double> BestOfBoth(const std::function<void()>& shallow,
                                     const std::function<void()>& deep) {
  const auto seconds = [](const std::function<void()>& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  shallow();
  deep();
  double one = seconds(shallow), two = seconds(deep);
  for (int i = 1; i < kReps; ++i) {
    one = std::min(one, seconds(shallow));
    two = std::min(two, seconds(deep));
  }
  return {one, two};
}

// A pass timed at 1 and kCalibrationLayers layers on `tokens` tokens: the
// difference gives the layers' seconds, the rest is outside them; each
// share's FLOP over its seconds.
tools::PassRate RateOf(std::pair<double, double> seconds, const tools::DepthFlops& flops,
                       double tokens) {
  const auto [one, deep] = seconds;
  const double layer = std::max((deep - one) / (kCalibrationLayers - 1), kMinShare * deep);
  const double outside = std::max(one - layer, kMinShare * deep);
  return {tokens * flops.per_layer / layer, tokens * flops.outside / outside};
}

// This machine's rates for the job (tools::MachineRates): the roofline,
// and each pass of the job's model at its shapes timed at two depths.
tools::MachineRates MeasureRates(const v1::JobConfig& job, const tools::PlanWorkload& w) {
  v1::ModelConfig m = job.model();
  m.set_n_layers(kCalibrationLayers);
  Calibration c;
  c.seq = RlSequenceLength(job, w);
  c.prompt = w.prompt_tokens;
  c.max_new = job.sampling().max_new_tokens();
  const int64_t samples = std::max<int64_t>(
      1, int64_t{job.grpo().prompts_per_step()} * job.grpo().responses_per_prompt());
  c.samples =
      CalibrationRows(samples, c.seq * config::ForwardFlopsPerToken(m, w.vocab_size, c.seq));
  c.decoding = CalibrationRows(
      samples, config::ForwardFlopsPerToken(m, w.vocab_size, c.prompt + c.max_new / 2));
  c.rows = CalibrationRows(std::min<int64_t>(job.grpo().micro_batch_size(), c.samples),
                           c.seq * config::TrainFlopsPerToken(m, w.vocab_size, c.seq));
  tools::MachineRates rates;
  rates.calibration_layers = kCalibrationLayers;
  rates.matmul_flops_per_second = model::MeasureMatmulRate(c.rows * c.seq, m.d_model(), m.d_ff());
  const Passes one = MakePasses(job, w, c, 1);
  const Passes deep = MakePasses(job, w, c, kCalibrationLayers);
  const bool checkpointing = job.memory().activation_checkpointing();
  rates.train = RateOf(BestOfBoth(one.train, deep.train),
                       tools::TrainDepthFlops(m, w.vocab_size, c.seq, checkpointing),
                       static_cast<double>(c.rows * c.seq));
  const auto [optimizer_one, optimizer_deep] = BestOfBoth(one.optimizer, deep.optimizer);
  rates.optimizer_per_layer_seconds =
      std::max(optimizer_deep - optimizer_one, 0.0) / (kCalibrationLayers - 1);
  rates.optimizer_outside_seconds =
      std::max(optimizer_one - rates.optimizer_per_layer_seconds, 0.0);
  rates.forward = RateOf(BestOfBoth(one.forward, deep.forward),
                         tools::ForwardDepthFlops(m, w.vocab_size, c.seq),
                         static_cast<double>(c.samples * c.seq));
  rates.decode = RateOf(BestOfBoth(one.decode, deep.decode),
                        tools::ForwardDepthFlops(m, w.vocab_size, c.prompt + c.max_new / 2),
                        static_cast<double>(c.decoding));
  return rates;
}

}  // namespace

absl::StatusOr<tools::PlanWorkload> JobWorkload(const v1::JobConfig& job) {
  absl::StatusOr<data::Split> split = run::LoadJobData(job);
  if (!split.ok()) return split.status();
  absl::StatusOr<std::unique_ptr<loop::PromptFormat>> format = loop::PromptFormat::ForJob(job);
  if (!format.ok()) return format.status();
  tools::PlanWorkload w;
  w.vocab_size = model::VocabSize(job.model(), (*format)->tokenizer().vocab_size());
  std::vector<const data::Example*> examples;
  for (const data::Example& ex : split->train) examples.push_back(&ex);
  for (const data::Example& ex : split->eval) examples.push_back(&ex);
  for (const data::Example* example : examples) {
    const data::Example& ex = *example;
    absl::StatusOr<v1::Prompt> prompt = (*format)->MakePrompt(ex);
    if (!prompt.ok()) return prompt.status();
    // The plan's shapes come from the longest prompt: one past the model's
    // context would size tensors no run makes.
    if (prompt->token_ids_size() >= job.model().max_seq_len()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt ", ex.id, " has ", prompt->token_ids_size(),
          " tokens, leaving no room for a response within model.max_seq_len ",
          job.model().max_seq_len()));
    }
    absl::StatusOr<std::vector<int32_t>> answer =
        (*format)->ResponseTokens(ex.answer, absl::StrCat("answer of example ", ex.id));
    if (!answer.ok()) return answer.status();
    w.prompt_tokens = std::max<int64_t>(w.prompt_tokens, prompt->token_ids_size());
    w.answer_tokens = std::max<int64_t>(w.answer_tokens, answer->size());
  }
  const int64_t held_out = static_cast<int64_t>(split->eval.size());
  w.eval_prompts = job.eval().num_prompts() > 0
                       ? std::min<int64_t>(job.eval().num_prompts(), held_out)
                       : held_out;
  w.source =
      absl::StrCat("the job's ", examples.size(),
                   " training and held-out examples: longest prompt ", w.prompt_tokens,
                   " tokens (BOS or chat template included), longest answer ", w.answer_tokens, " (EOS included)");
  return w;
}

int64_t RlSequenceLength(const v1::JobConfig& job, const tools::PlanWorkload& workload) {
  return workload.prompt_tokens + job.sampling().max_new_tokens() - 1;
}

absl::StatusOr<tools::Plan> PlanJob(const v1::JobConfig& job_in) {
  v1::JobConfig job = job_in;
  if (absl::Status s = loop::PrepareJob(&job); !s.ok()) return s;
  absl::StatusOr<tools::PlanWorkload> workload = JobWorkload(job);
  if (!workload.ok()) return workload.status();
  roles::SetThreads(job);
  return tools::MakePlan(job, *workload, MeasureRates(job, *workload));
}

}  // namespace trellis::tools
