#include "tools/plan_job.h"

#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <string>
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
constexpr int kReps = 5;
// The calibration's bounds, so a plan answers in seconds at any model size:
// at most this many transformer layers (each layer's rate is the same, and
// the embedding and head keep their full size), and batches cut to at most
// this much arithmetic per timed call (a rate that no longer grows with
// the batch: ~0.1 s at a CPU's matrix-product rate).
constexpr int32_t kCalibrationLayers = 2;
constexpr double kCalibrationFlops = 8e9;

// Rows of a batch at `flops_per_row` that fit the calibration's budget.
int64_t CalibrationRows(int64_t rows, double flops_per_row) {
  const auto fit = static_cast<int64_t>(kCalibrationFlops / std::max(flops_per_row, 1.0));
  return std::clamp<int64_t>(fit, 1, rows);
}

// Times the job's model (random weights, its memory strategies, at most
// kCalibrationLayers layers) at the shapes of the update, the reference
// pass and one decode step, as FLOP per second of that model.
tools::MachineRates MeasureRates(const v1::JobConfig& job, const tools::PlanWorkload& w) {
  const int64_t seq = RlSequenceLength(job, w);
  v1::ModelConfig m = job.model();
  m.set_n_layers(std::min(m.n_layers(), kCalibrationLayers));
  const int64_t samples = CalibrationRows(
      std::max<int64_t>(
          1, int64_t{job.grpo().prompts_per_step()} * job.grpo().responses_per_prompt()),
      seq * config::ForwardFlopsPerToken(m, w.vocab_size, seq));
  const int64_t rows =
      CalibrationRows(std::min<int64_t>(job.grpo().micro_batch_size(), samples),
                      seq * config::TrainFlopsPerToken(m, w.vocab_size, seq));
  const int64_t P = w.prompt_tokens, max_new = job.sampling().max_new_tokens();
  tools::MachineRates rates;
  rates.matmul_flops_per_second = model::MeasureMatmulRate(rows * seq, m.d_model(), m.d_ff());
  torch::manual_seed(1);
  model::Transformer model(m, w.vocab_size, model::Head::kLanguageModel, job.memory().lora());
  model->ApplyMemoryConfig(job.memory());
  const torch::Tensor batch = torch::randint(w.vocab_size, {rows, seq}, torch::kLong);
  const double train = model::BestSeconds(
      [&] {
        const torch::Tensor logp = torch::log_softmax(model->forward(batch), -1);
        logp.gather(-1, batch.unsqueeze(-1)).sum().backward();
      },
      kReps);
  rates.train_flops_per_second =
      rows * seq * config::TrainFlopsPerToken(m, w.vocab_size, seq) / train;
  // The optimizer step's time grows with the trained elements: those of
  // the calibration's layers are scaled to the job's layer count.
  std::vector<torch::Tensor> trained;
  double in_layers = 0, outside = 0;
  for (const auto& named : model->named_parameters()) {
    if (!named.value().requires_grad()) continue;
    trained.push_back(named.value());
    const auto n = static_cast<double>(named.value().numel());
    (named.key().starts_with("model.layers.") ? in_layers : outside) += n;
  }
  torch::optim::AdamW optimizer(trained);
  const double job_elements = outside + in_layers * job.model().n_layers() / m.n_layers();
  rates.optimizer_step_seconds = model::BestSeconds([&] { optimizer.step(); }, kReps) *
                                 job_elements / std::max(outside + in_layers, 1.0);
  torch::NoGradGuard no_grad;
  // Padded batches, as the roles run them: positions and a key mask.
  const auto positions = [&](int64_t length) {
    return torch::arange(length).unsqueeze(0).expand({samples, length}).contiguous();
  };
  const torch::Tensor all = torch::randint(w.vocab_size, {samples, seq}, torch::kLong);
  const torch::Tensor all_valid = torch::ones({samples, seq}, torch::kBool);
  const double forward = model::BestSeconds(
      [&] { torch::log_softmax(model->forward(all, positions(seq), all_valid), -1); }, kReps);
  rates.forward_flops_per_second =
      samples * seq * config::ForwardFlopsPerToken(m, w.vocab_size, seq) / forward;
  // A cache filled to the response's middle; each timed step decodes one
  // token per sample at that position and samples the next.
  const int64_t context = P + max_new / 2;
  model::KVCache cache = model->NewCache(samples, P + max_new);
  const torch::Tensor prefix = torch::randint(w.vocab_size, {samples, context}, torch::kLong);
  model->forward(prefix, positions(context), torch::ones({samples, context}, torch::kBool), &cache);
  const torch::Tensor token = torch::randint(w.vocab_size, {samples, 1}, torch::kLong);
  const torch::Tensor position = torch::full({samples, 1}, context, torch::kLong);
  v1::SamplingParams params;
  params.set_temperature(job.sampling().temperature());
  params.set_top_p(job.sampling().top_p());
  const torch::Tensor uniforms = torch::rand({samples}, torch::kFloat64);
  const double decode = model::BestSeconds(
      [&] {
        cache.length = context;
        const torch::Tensor key_valid = torch::ones({samples, context + 1}, torch::kBool);
        const torch::Tensor logits =
            model->forward(token, position, key_valid, &cache).select(1, 0);
        actor::SampleNext(logits, params, uniforms);
      },
      kReps);
  rates.decode_flops_per_second =
      samples * config::ForwardFlopsPerToken(m, w.vocab_size, context) / decode;
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
