#include "config/rank_memory.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/recipe.h"

namespace trellis::config {
namespace {

// A float32 element.
constexpr double kFloatBytes = 4;

// Samples a step rolls out (0 for a recipe that does not roll out).
double StepSamples(const v1::JobConfig& job, std::optional<Recipe> recipe) {
  if (recipe == Recipe::kOnlineDpo) {
    return static_cast<double>(job.dpo().batch_size()) * job.dpo().responses_per_prompt();
  }
  if (recipe == Recipe::kGrpo || recipe == Recipe::kPpo || recipe == Recipe::kDistill) {
    return static_cast<double>(job.grpo().prompts_per_step()) * job.grpo().responses_per_prompt();
  }
  return 0;
}

// The recipe's own optimizer and the rows and sequence length of its
// smallest update micro-batch.
struct Update {
  const v1::OptimizerConfig* optimizer = nullptr;
  double rows = 0, seq = 0;
};

Update UpdateOf(const v1::JobConfig& job, std::optional<Recipe> recipe) {
  const double micro = job.grpo().micro_batch_size();
  // A one-token prompt and a response at its longest, or a shortest
  // supervised pair (one prompt token, one target token).
  const double rl_seq = 1.0 + job.sampling().max_new_tokens();
  switch (recipe.value_or(Recipe::kGrpo)) {
    case Recipe::kSft:
      return {&job.sft().optimizer(), std::min<double>(micro, job.sft().batch_size()), 2};
    case Recipe::kDpo:
      return {&job.dpo().optimizer(), 2 * std::min<double>(micro, job.dpo().batch_size()), 2};
    case Recipe::kOnlineDpo:
      return {&job.dpo().optimizer(), 2 * std::min<double>(micro, job.dpo().batch_size()), rl_seq};
    case Recipe::kRewardModel:
      return {&job.reward_model().optimizer(),
              2 * std::min<double>(micro, job.reward_model().batch_size()), 2};
    case Recipe::kGrpo:
    case Recipe::kPpo:
    case Recipe::kDistill: break;
  }
  return {&job.grpo().optimizer(), std::min(micro, StepSamples(job, recipe)), rl_seq};
}

// The learner's process: one rank's model state (the weights, and with
// every weight trained their gradients and optimizer state; under LoRA the
// frozen base alone) and one micro-batch's block outputs and log-softmax.
ProcessPrice LearnerPrice(const v1::JobConfig& job, const ModelShape& s, int ranks) {
  const std::optional<Recipe> recipe = RecipeOf(job);
  const Update update = UpdateOf(job, recipe);
  const bool lora = job.memory().lora().rank() > 0;
  const bool bf16 = job.memory().precision() == v1::MemoryConfig::BF16;
  const int64_t weight_bytes = bf16 ? 2 : 4;
  const double n = static_cast<double>(ParameterCount(s));
  LearnerState whole;
  whole.parameters = weight_bytes * n;
  whole.master_weights = bf16 ? kFloatBytes * n : 0;
  whole.gradients = lora ? 0 : kFloatBytes * n;
  whole.optimizer_state = lora ? 0 : OptimizerStateBytes(*update.optimizer, 1) * n;
  const int stage = job.memory().zero_stage();
  const LearnerState rank = LearnerRank(whole, s, weight_bytes, stage, ranks);
  // Each block's output (bf16: 2 B) and the log-softmax row per token.
  const double per_token = 2.0 * s.L * s.d + kFloatBytes * s.V;
  const double activations = update.rows * update.seq * per_token;
  std::string what = absl::StrCat(
      GiBText(rank.total()), " of weights", lora ? "" : ", gradients and optimizer state", " (",
      static_cast<int64_t>(n), " parameters");
  if (ranks > 1) absl::StrAppend(&what, ", memory.zero_stage ", stage, " over ", ranks, " ranks");
  if (rank.gathered > 0) absl::StrAppend(&what, ", ", GiBText(rank.gathered), " of it gathered");
  absl::StrAppend(&what, ") + ", GiBText(activations), " of activations (", update.rows, " rows x ",
                  update.seq, " tokens x (2 B x n_layers x d_model + 4 B x vocab_size))");
  return {"learner", rank.total() + activations, std::move(what)};
}

// One rank of a tensor-parallel group of `k`: its slice of the weights and
// of the KV cache of `rows` samples (0: a reference, which keeps none).
// `in_place`: an actor whose ranks receive their slices from the resharding
// sync, which keeps no whole model.
ProcessPrice SlicePrice(std::string process, const ModelShape& s, int k, double rows,
                        double tokens, bool in_place) {
  // A tensor-parallel replica is one process whose K ranks are threads: it
  // keeps the whole model (the weight sync's receive buffer, the loaded
  // reference) beside the K ranks' slices, and one KV cache of every head
  // that each rank reads its heads of (docs/parallelism.md).
  const double slices =
      k > 1 ? k * kFloatBytes * static_cast<double>(ParameterCount(TensorParallelShape(s, k)))
            : 0;
  const double whole =
      k > 1 && in_place ? 0 : kFloatBytes * static_cast<double>(ParameterCount(s));
  const double cache = KvCacheBytes(s, rows, tokens);
  std::string what = absl::StrCat(GiBText(whole), " of weights");
  if (k > 1) {
    absl::StrAppend(&what, " + ", GiBText(slices), " of its ", k,
                    " ranks' slices (1/K of each block, the embedding, norms and head whole)");
  }
  if (rows > 0) {
    absl::StrAppend(&what, " + ", GiBText(cache), " of KV cache (", rows,
                    " samples x 4 B x 2 x n_layers x n_kv_heads x head size x (1 + "
                    "sampling.max_new_tokens))");
  }
  if (k > 1) absl::StrAppend(&process, " (", k, " tensor-parallel ranks on threads)");
  return {std::move(process), whole + slices + cache, std::move(what)};
}

std::string LearnerCountAdvice(const v1::JobConfig& job, double limit, int64_t vocab_size) {
  const ModelShape s = ShapeOf(job.model(), vocab_size);
  const int fits = SmallestLearnerCount(
      limit, [&](int ranks) { return LearnerPrice(job, s, ranks).bytes; });
  if (fits > 0) return absl::StrCat("; the smallest deployment.learner.count that fits: ", fits);
  return absl::StrCat("; no deployment.learner.count up to ", kMaxLearnerRanks,
                      " fits at memory.zero_stage ", job.memory().zero_stage(),
                      job.memory().zero_stage() < 3 ? " (a higher stage splits more)" : "");
}

}  // namespace

bool ReshardsWeights(const v1::JobConfig& job) {
  const std::string& transport = job.deployment().weight_transport();
  return job.memory().zero_stage() >= 2 && job.memory().lora().rank() == 0 &&
         (transport == "gloo" || transport == "tcp" || transport == "nccl");
}

std::string GiBText(double bytes) { return absl::StrFormat("%.3g GiB", bytes / (1 << 30)); }

int64_t OuterParameters(const ModelShape& s) { return s.V * s.d + s.d + (s.tied ? 0 : s.V * s.d); }

int64_t BlockParameters(const ModelShape& s) {
  return s.L > 0 ? (ParameterCount(s) - OuterParameters(s)) / s.L : 0;
}

ModelShape TensorParallelShape(const ModelShape& s, int k) {
  ModelShape slice = s;
  slice.H /= k;
  slice.KV /= k;
  slice.qd /= k;
  slice.kvd /= k;
  slice.f /= k;
  slice.ef /= k;
  return slice;
}

double LearnerState::total() const {
  return parameters + gradients + optimizer_state + master_weights + gathered + buckets;
}

LearnerState LearnerRank(const LearnerState& whole, const ModelShape& s, int64_t weight_bytes,
                         int zero_stage, int ranks) {
  LearnerState rank = whole;
  if (ranks <= 1 || zero_stage == 0) return rank;
  const auto share = [ranks](double bytes) { return std::ceil(bytes / ranks); };
  rank.optimizer_state = share(whole.optimizer_state);
  if (zero_stage >= 2) {
    rank.gradients = share(whole.gradients);
    rank.master_weights = share(whole.master_weights);
    // The largest unit's share of the gradients, whole before its
    // reduce-scatter.
    const double largest = static_cast<double>(std::max(BlockParameters(s), OuterParameters(s)));
    rank.buckets = whole.gradients * largest / static_cast<double>(ParameterCount(s));
  }
  if (zero_stage >= 3) {
    rank.parameters = share(whole.parameters);
    const int64_t blocks = std::min<int64_t>(2, s.L);
    rank.gathered = static_cast<double>(weight_bytes) *
                    static_cast<double>(blocks * BlockParameters(s) + OuterParameters(s));
  }
  return rank;
}

std::vector<ProcessPrice> PriceProcesses(const v1::JobConfig& job, ProcessLayout layout,
                                         int64_t vocab_size, int learners) {
  const ModelShape s = ShapeOf(job.model(), vocab_size);
  const v1::DeploymentConfig& d = job.deployment();
  const bool embedded = layout == ProcessLayout::kEmbedded;
  const int ranks = embedded ? 1 : learners > 0 ? learners : std::max(1, d.learner().count());
  std::vector<ProcessPrice> out = {LearnerPrice(job, s, ranks)};
  const double samples = StepSamples(job, RecipeOf(job));
  if (samples > 0) {
    const double rows = std::max(1.0, samples / std::max(1, d.actor().count()));
    out.push_back(SlicePrice("actor", s, embedded ? 1 : std::max(1, d.actor().tensor_parallel()),
                             embedded ? samples : rows, 1.0 + job.sampling().max_new_tokens(),
                             !embedded && ReshardsWeights(job)));
    if (ReferenceIsTeacher(job) || job.grpo().kl_coef() > 0) {
      const int k = embedded ? 1 : std::max(1, d.reference().tensor_parallel());
      out.push_back(
          SlicePrice("reference", ShapeOf(ReferenceModel(job), vocab_size), k, 0, 0, false));
    }
  }
  if (!embedded) return out;
  ProcessPrice one{"the one process of `trellis run` (every role)", 0, ""};
  for (const ProcessPrice& p : out) {
    one.bytes += p.bytes;
    absl::StrAppend(&one.what, one.what.empty() ? "" : "; ", p.process, ": ", p.what);
  }
  return {one};
}

int SmallestLearnerCount(double limit_bytes, const std::function<double(int learners)>& price) {
  for (int n = 1; n <= kMaxLearnerRanks; ++n) {
    if (price(n) <= limit_bytes) return n;
  }
  return 0;
}

absl::Status CheckProcessMemoryLimit(const v1::JobConfig& job, ProcessLayout layout) {
  const int64_t limit = job.memory().process_memory_limit_bytes();
  if (limit <= 0) return absl::OkStatus();
  for (const ProcessPrice& p : PriceProcesses(job, layout, 0)) {
    if (p.bytes <= static_cast<double>(limit)) continue;
    const bool learner = layout == ProcessLayout::kLaunched && p.process == "learner";
    return absl::FailedPreconditionError(absl::StrCat(
        "memory.process_memory_limit_bytes: ", p.process,
        learner ? absl::StrCat(" (each of deployment.learner.count ",
                               std::max(1, job.deployment().learner().count()), " ranks)")
                : "",
        " needs at least ", GiBText(p.bytes), " (", static_cast<int64_t>(p.bytes), " bytes: ",
        p.what, "), over the limit ",
        GiBText(static_cast<double>(limit)), " (", limit, " bytes)",
        learner ? LearnerCountAdvice(job, static_cast<double>(limit), 0)
        : layout == ProcessLayout::kEmbedded
            ? "; `trellis launch` gives each role (and each learner rank) its own process"
            : ""));
  }
  return absl::OkStatus();
}

}  // namespace trellis::config
