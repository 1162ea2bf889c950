#include "tools/planner.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/flops.h"
#include "config/job_size.h"
#include "config/recipe.h"
#include "config/worker_id.h"
#include "model/lora.h"
#include "tools/plan_activations.h"

namespace trellis::tools {
namespace {

using Shape = config::ModelShape;
using config::MatmulParameters;
using config::OptimizerStateBytes;
using config::ShapeOf;

// LoRA's adapters: per layer, rank x (in + out) for each target projection
// (job.proto LoraConfig; none without a rank).
int64_t AdapterParameters(const Shape& s, const v1::LoraConfig& lora) {
  if (lora.rank() <= 0) return 0;
  const std::map<v1::LoraConfig::Projection, int64_t> in_plus_out = {
      {v1::LoraConfig::Q_PROJ, s.d + s.qd},      {v1::LoraConfig::K_PROJ, s.d + s.kvd},
      {v1::LoraConfig::V_PROJ, s.d + s.kvd},     {v1::LoraConfig::O_PROJ, s.qd + s.d},
      {v1::LoraConfig::GATE_PROJ, s.d + s.f},    {v1::LoraConfig::UP_PROJ, s.d + s.f},
      {v1::LoraConfig::DOWN_PROJ, s.f + s.d}};
  int64_t per_layer = 0;
  for (v1::LoraConfig::Projection t : model::LoraTargets(lora)) {
    per_layer += lora.rank() * in_plus_out.at(t);
  }
  return s.L * per_layer;
}

// The backward's scratch above the saved activations, per token, measured:
// its peak comes at the head, with the gradients of the log-softmax and the
// logits in flight (2V), or at the final norm (2d); by the time the MLPs'
// gradients are made, the head's saved tensors are gone.
int64_t BackwardWorkspacePerToken(const Shape& s) { return std::max(2 * s.V, 2 * s.d); }
constexpr char kBackwardFormula[] = "4 B x rows x seq x max(2V, 2d)";

constexpr char kNoGradFormula[] =
    "4 B x rows x seq x (max(MLP + 5.5d, 2V + d) + 2hd), MLP 4d_ff or, of a mixture, "
    "k(4ef + 2d) + 2E";

std::string OptimizerFormula(const v1::OptimizerConfig& o) {
  if (o.name() == v1::OptimizerConfig::SGD) {
    return o.momentum() > 0 ? "4 B x N (SGD momentum)" : "0 (SGD, no momentum)";
  }
  return "2 x 4 B x N (AdamW exp_avg, exp_avg_sq)";
}

// The optimizer step's scratch: AdamW makes two temporaries the size of
// the parameter it updates (sqrt, then the division), SGD one.
int64_t StepWorkspace(const v1::OptimizerConfig& o, const Shape& s) {
  const int64_t largest = std::max({s.V * s.d, s.d * s.f, s.d * s.d, 2 * s.E * s.ef * s.d});
  return (o.name() == v1::OptimizerConfig::SGD ? 1 : 2) * kFloat * largest;
}

PlanStage StagePlan(const Plan& plan, std::string role, std::string stage,
                std::vector<PlanLine> transient) {
  PlanStage out{std::move(role), std::move(stage), std::move(transient), plan.resident_bytes};
  for (const PlanLine& l : out.transient) out.peak_bytes += l.bytes;
  return out;
}

std::vector<PlanLine> TrainTransients(const Shape& s, const v1::OptimizerConfig& o,
                                      const Strategy& st, int64_t rows, int64_t seq) {
  const int64_t tokens = rows * seq;
  const int64_t backward = kFloat * tokens * BackwardWorkspacePerToken(s);
  const int64_t step = StepWorkspace(o, s);
  const std::string learner = config::WorkerId(v1::LEARNER).ToString();
  return {{learner, "activations", tokens * ActivationBytesPerToken(s, st),
           absl::StrCat(ActivationFormula(s, st), ", rows ", rows, ", seq ", seq)},
          {learner, "workspace", std::max(backward, step),
           absl::StrCat("max(backward ", kBackwardFormula, ", optimizer step ",
                        o.name() == v1::OptimizerConfig::SGD ? "1" : "2",
                        " x 4 B x largest parameter)")}};
}

// `rows` sampled sequences of `prefill_rows` prompts (each prompt is
// prefilled once for all its responses: actor/internal/engine.h).
std::vector<PlanLine> GenerateTransients(const Shape& s, int64_t rows, int64_t prefill_rows,
                                         int64_t prompt, int64_t max_new) {
  const int64_t cap = prompt + max_new;
  const std::string actor = config::WorkerId(v1::ACTOR).ToString();
  return {{actor, "kv_cache", static_cast<int64_t>(config::KvCacheBytes(s, rows, cap)),
           absl::StrCat("4 B x 2 x L x rows x KV x (prompt + max_new) x hd, rows ", rows,
                        ", prompt ", prompt, ", max_new ", max_new)},
          {actor, "workspace", kFloat * prefill_rows * prompt * NoGradPerToken(s),
           absl::StrCat("prefill ", kNoGradFormula, ", rows = prompts ", prefill_rows,
                        ", seq = prompt")}};
}

// A pass's FLOP per token (DepthFlops), printed with its stage: P_l is a
// layer's matrix-product parameters.
constexpr char kForwardFormula[] =
    "2·V·d at the outside rate + L x (2·P_l + 4·seq·d) at the layer rate";
std::string TrainFormula(bool checkpointing) {
  return absl::StrCat("6·V·d at the outside rate + L x (6·P_l + 12·seq·d",
                      checkpointing ? " + recompute 2·P_l + 4·seq·d" : "", ") at the layer rate");
}

// A layer's matrix-product parameters a token uses (q, k, v, o and the
// MLP, or a mixture's router and k experts).
double LayerMatmulParameters(const Shape& s) {
  const int64_t mlp = s.E > 0 ? s.E * s.d + s.k * 3 * s.d * s.ef : 3 * s.d * s.f;
  return static_cast<double>(2 * s.d * s.qd + 2 * s.d * s.kvd + mlp);
}

}  // namespace

// The gathered inputs and weighted outputs of a mixture's experts count in
// its MLP term (measured).
int64_t NoGradPerToken(const Shape& s) {
  const int64_t mlp = s.E > 0 ? s.k * (4 * s.ef + 2 * s.d) + 2 * s.E : 4 * s.f;
  return std::max(mlp + 11 * s.d / 2, 2 * s.V + s.d) + 2 * s.hd;
}

DepthFlops ForwardDepthFlops(const v1::ModelConfig& model, int64_t vocab_size, int64_t seq) {
  const Shape s = ShapeOf(model, vocab_size);
  return {2.0 * s.V * s.d, 2.0 * LayerMatmulParameters(s) + 4.0 * seq * s.d};
}

DepthFlops TrainDepthFlops(const v1::ModelConfig& model, int64_t vocab_size, int64_t seq,
                           bool checkpointing) {
  const Shape s = ShapeOf(model, vocab_size);
  const double recompute = checkpointing ? ForwardDepthFlops(model, vocab_size, seq).per_layer : 0;
  return {6.0 * s.V * s.d, 6.0 * LayerMatmulParameters(s) + 12.0 * seq * s.d + recompute};
}

double PassSeconds(const PassRate& rate, const DepthFlops& flops, int64_t layers, double tokens) {
  return tokens * (flops.outside / rate.outside_flops_per_second +
                   static_cast<double>(layers) * flops.per_layer / rate.layer_flops_per_second);
}

Plan MakePlan(const v1::JobConfig& job, const PlanWorkload& w, const MachineRates& rates) {
  const Shape s = ShapeOf(job.model(), w.vocab_size);
  Plan plan;
  plan.parameters = config::ParameterCount(s);
  plan.matmul_parameters = MatmulParameters(s);
  plan.expert_parameters = s.L * s.E * (s.d + 3 * s.d * s.ef);
  plan.shape = s;
  plan.rates = rates;
  // FLOP of `tokens` through a model of `layers` layers (the policy's by
  // default).
  const auto flops_of = [&](const DepthFlops& f, double tokens, int64_t layers = -1) {
    return tokens * (f.outside + (layers < 0 ? s.L : layers) * f.per_layer);
  };
  const double optimizer_seconds =
      rates.optimizer_outside_seconds + s.L * rates.optimizer_per_layer_seconds;
  const int64_t N = plan.parameters;
  const bool has_sft = job.sft().steps() > 0;
  const bool has_rl = job.grpo().steps() > 0;
  // The reference's own shape: a distill teacher's, else the policy's.
  const bool teacher = config::ReferenceIsTeacher(job);
  const bool has_reference = teacher || job.grpo().kl_coef() > 0;
  const v1::ModelConfig& reference_model = config::ReferenceModel(job);
  const Shape rs = ShapeOf(reference_model, w.vocab_size);
  const int64_t R = config::ParameterCount(rs);
  plan.reference_shape = rs;
  const std::string n_formula =
      absl::StrCat("N = V·d + L(2d + 2d² + 2d·kvd + ", s.E > 0 ? "E(d + 3d·ef)" : "3d·d_ff",
                   ") + d", s.tied ? "" : " + V·d", " = ", N);
  // What trains: every parameter, or LoRA's adapters (the base frozen).
  const int64_t A = AdapterParameters(s, job.memory().lora());
  const int64_t T = A > 0 ? A : N;
  const std::string t_name = A > 0 ? "A" : "N";
  // LoRA, every role in one process: the learner holds the frozen base and
  // the others point at it (model/shared_base.h): the actor unless it is
  // colocated (its weights move to the host and back), the reference
  // unless it is offloaded or a warm-up trained adapters before it was
  // taken (then it is not the base).
  const bool actor_shares =
      A > 0 && job.deployment().placement() != v1::DeploymentConfig::COLOCATED;
  const bool reference_shares = A > 0 && !job.memory().offload_frozen() && !has_sft && !teacher;

  // Resident objects, every role in this process.
  const std::string learner = config::WorkerId(v1::LEARNER).ToString();
  const std::string actor = config::WorkerId(v1::ACTOR).ToString();
  const std::string reference = config::WorkerId(v1::REFERENCE).ToString();
  const std::string scheduler = config::WorkerId(v1::SCHEDULER).ToString();
  const Strategy st = StrategyOf(job);
  plan.resident.push_back({learner, "parameters", st.weight_bytes * N,
                           absl::StrCat(st.masters ? "2 B (bf16)" : "4 B", " x ", n_formula)});
  if (A > 0) {
    plan.resident.push_back(
        {learner, "adapters", kFloat * A,
         absl::StrCat("4 B x A, A = L x sum over target projections of rank x (in + out) = ", A,
                      " (LoRA; the base above is frozen)")});
  }
  if (st.masters) {
    plan.resident.push_back({learner, "master_weights", kFloat * N,
                             "4 B x N (fp32 masters the optimizer steps)"});
  }
  plan.resident.push_back(
      {learner, "gradients", kFloat * T,
       absl::StrCat("4 B x ", t_name,
                    st.masters ? " (fp32, on the masters: bf16 gradients are copied up after "
                                 "backward)"
                               : "")});
  int64_t optimizer = 0;
  std::string optimizer_formula;
  const auto optimizer_line = [&](const char* phase, const v1::OptimizerConfig& o) {
    optimizer += OptimizerStateBytes(o, T);
    absl::StrAppend(&optimizer_formula, optimizer_formula.empty() ? "" : "; ", phase, ": ",
                    OptimizerFormula(o), A > 0 ? ", N = A" : "");
  };
  if (has_sft) optimizer_line("sft", job.sft().optimizer());
  if (has_rl) optimizer_line("rl", job.grpo().optimizer());
  plan.resident.push_back({learner, "optimizer_state", optimizer, optimizer_formula});
  if (has_rl) {
    plan.resident.push_back(
        {learner, "communication", kFloat * T,
         A > 0 ? "4 B x A (only the adapters are staged for the actor)"
               : "4 B x N (the newest weights staged for the actor)"});
    if (actor_shares) {
      plan.resident.push_back(
          {actor, "parameters", kFloat * A, "4 B x A (the adapters; the base is the learner's)"});
    } else {
      plan.resident.push_back({actor, "parameters", kFloat * (N + A),
                               A > 0 ? "4 B x (N + A) (its own base and the adapters)"
                                     : "4 B x N"});
    }
  }
  if (has_rl && has_reference) {
    plan.resident.push_back({reference, "reference_model", reference_shares ? 0 : kFloat * R,
                             reference_shares ? "0 (the learner's base, adapters off)"
                             : teacher        ? absl::StrCat("4 B x ", R, " (the distill teacher)")
                                              : "4 B x N"});
  }
  for (const PlanLine& l : plan.resident) plan.resident_bytes += l.bytes;

  const int64_t micro = job.grpo().micro_batch_size();
  const int64_t P = w.prompt_tokens;
  if (has_sft) {
    const int64_t rows = std::min<int64_t>(micro, job.sft().batch_size());
    const int64_t seq = P + w.answer_tokens - 1;
    plan.stages.push_back(
        StagePlan(plan, learner, "sft",
                  TrainTransients(s, job.sft().optimizer(), st, rows, seq)));
    const double tokens = static_cast<double>(job.sft().batch_size()) * seq;
    const DepthFlops train = TrainDepthFlops(job.model(), w.vocab_size, seq, st.checkpointing);
    if (!has_rl) {
      plan.step_time.push_back(
          {"sft", flops_of(train, tokens),
           PassSeconds(rates.train, train, s.L, tokens) + optimizer_seconds,
           absl::StrFormat("batch %d x seq %d x (%s) at the train rates, + one optimizer step",
                           job.sft().batch_size(), seq, TrainFormula(st.checkpointing))});
    }
  }
  if (has_rl) {
    const int64_t max_new = job.sampling().max_new_tokens();
    const int64_t samples =
        static_cast<int64_t>(job.grpo().prompts_per_step()) * job.grpo().responses_per_prompt();
    const int64_t seq = P + max_new - 1;
    plan.stages.push_back(
        StagePlan(plan, actor, "rollout",
                  GenerateTransients(s, samples, job.grpo().prompts_per_step(), P, max_new)));
    // The reference scores in passes of micro_batch_size rows, as the
    // learner trains (reference/local_reference.cc).
    const int64_t rows = std::min(micro, samples);
    if (has_reference) {
      plan.stages.push_back(StagePlan(
          plan, reference, "reference",
          {{reference, "workspace", kFloat * rows * seq * NoGradPerToken(rs),
            absl::StrCat(kNoGradFormula, ", rows ", rows, " (one pass), seq ", seq)}}));
    }
    std::vector<PlanLine> update = TrainTransients(s, job.grpo().optimizer(), st, rows, seq);
    if (job.grpo().routing_replay()) {
      update.push_back({learner, "routing_records", samples * seq * s.L * s.k,
                        absl::StrCat("1 B x samples x seq x L x k (the batch's routing "
                                     "records), samples ",
                                     samples, ", seq ", seq)});
    }
    plan.stages.push_back(StagePlan(plan, learner, "update", std::move(update)));
    // What the other setting of memory.activation_checkpointing would give.
    Strategy other = st;
    other.checkpointing = !st.checkpointing;
    plan.notes.push_back(absl::StrFormat(
        "update activations %s per-layer checkpointing would be %.2f MiB instead of %.2f MiB",
        other.checkpointing ? "with" : "without",
        rows * seq * ActivationBytesPerToken(s, other) / static_cast<double>(1 << 20),
        rows * seq * ActivationBytesPerToken(s, st) / static_cast<double>(1 << 20)));
    plan.stages.push_back(StagePlan(
        plan, scheduler, "weight_sync",
        {{learner, "communication", kFloat * T,
          absl::StrCat("4 B x ", t_name,
                       " (the new version packed while the previous one is still staged)")}}));
    const int64_t eval_rows = std::min<int64_t>(job.eval().batch_size(), w.eval_prompts);
    plan.stages.push_back(
        StagePlan(plan, scheduler, "eval",
                  GenerateTransients(s, eval_rows, eval_rows, P, max_new)));
    plan.notes.push_back(absl::StrCat(
        "sequences of RL samples taken at their longest: prompt ", P, " + max_new_tokens ",
        max_new, "; responses that stop early need less"));

    // Rollout: each prompt's prefill, once for all its responses (the
    // engine copies a prompt's cache to its rows: actor/internal/engine.h),
    // then one decode step per new token at the context's middle length.
    const int64_t prompts = job.grpo().prompts_per_step();
    const DepthFlops prefill = ForwardDepthFlops(job.model(), w.vocab_size, P);
    const DepthFlops decode = ForwardDepthFlops(job.model(), w.vocab_size, P + max_new / 2);
    const double prefill_tokens = static_cast<double>(prompts) * P;
    const double decode_tokens = static_cast<double>(samples) * max_new;
    plan.step_time.push_back(
        {"rollout", flops_of(prefill, prefill_tokens) + flops_of(decode, decode_tokens),
         PassSeconds(rates.forward, prefill, s.L, prefill_tokens) +
             PassSeconds(rates.decode, decode, s.L, decode_tokens),
         absl::StrFormat("(%d prompts x %d tokens at the forward rates + %d samples x %d new "
                         "tokens at the decode rates, seq = prompt + max_new/2) x (%s)",
                         prompts, P, samples, max_new, kForwardFormula)});
    const double tokens = static_cast<double>(samples) * seq;
    if (has_reference) {
      const DepthFlops scored = ForwardDepthFlops(reference_model, w.vocab_size, seq);
      plan.step_time.push_back({"reference", flops_of(scored, tokens, rs.L),
                                PassSeconds(rates.forward, scored, rs.L, tokens),
                                absl::StrFormat("%d samples x seq %d x (%s) at the forward rates",
                                                samples, seq, kForwardFormula)});
    }
    const DepthFlops train = TrainDepthFlops(job.model(), w.vocab_size, seq, st.checkpointing);
    plan.step_time.push_back(
        {"update", flops_of(train, tokens),
         PassSeconds(rates.train, train, s.L, tokens) + optimizer_seconds,
         absl::StrFormat("%d samples x seq %d x (%s) at the train rates, + one optimizer step",
                         samples, seq, TrainFormula(st.checkpointing))});
  }
  for (const PlanTime& t : plan.step_time) plan.step_seconds += t.seconds;
  for (const PlanStage& st : plan.stages) {
    if (st.peak_bytes > plan.peak_bytes) {
      plan.peak_bytes = st.peak_bytes;
      plan.peak_role = st.role;
      plan.peak_stage = st.stage;
    }
  }
  if (A > 0) {
    plan.notes.push_back(
        "LoRA, every role in this process: the base is held once, by the learner "
        "(model/shared_base.h); launched, the actor and the reference each hold their own");
  }
  const v1::DeploymentConfig& d = job.deployment();
  if (job.memory().zero_stage() > 0 || d.learner().count() > 1 ||
      d.actor().tensor_parallel() > 1 || d.reference().tensor_parallel() > 1) {
    plan.notes.push_back(
        "the stages above are `trellis run`'s one process (one learner, whole models); each "
        "process `trellis launch` starts (a learner rank under memory.zero_stage, an actor or "
        "reference rank of its tensor-parallel group) is priced under \"processes\"; ZeRO "
        "ranks send and receive about twice the trained weights' bytes per step");
  }
  if (const std::optional<config::Recipe> recipe = config::RecipeOf(job);
      recipe != config::Recipe::kGrpo && recipe != config::Recipe::kSft &&
      recipe != config::Recipe::kDistill) {
    plan.notes.push_back(absl::StrCat("algorithm ", job.algorithm(),
                                      ": its extra objects (critic, reward model, pairs) are "
                                      "not in this plan; it covers grpo, distill and sft jobs"));
  }
  plan.offload = PriceOffload(job, plan);
  plan.notes.push_back("source of the sequence lengths: " + w.source);
  return plan;
}

}  // namespace trellis::tools
