// Range and cross-field checks of a parsed job. Every violation is reported
// (joined by "; "), each as "<field path>: must be <rule>, found <value>"
// (internal/checker.h); the upper bounds of sizes and scales are
// job_limits.cc's.

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/choice.h"
#include "config/http_uri.h"
#include "config/internal/checker.h"
#include "config/internal/limits.h"
#include "config/internal/model_checks.h"
#include "config/internal/parallel_checks.h"
#include "config/job_config.h"
#include "config/recipe.h"

namespace trellis::config {
namespace {

using internal::Checker;
using internal::CheckModel;

void CheckArithmetic(const v1::ArithmeticTaskConfig& a, Checker& c) {
  const std::string p = "data.arithmetic.";
  c.Require(a.min_digits() >= 1 && a.min_digits() <= 9, p + "min_digits", "in [1, 9]",
            a.min_digits());
  c.Require(a.max_digits() >= 1 && a.max_digits() <= 9, p + "max_digits", "in [1, 9]",
            a.max_digits());
  c.Require(a.max_digits() >= a.min_digits(), p + "max_digits",
            absl::StrCat(">= min_digits (", a.min_digits(), ")"), a.max_digits());
  c.Require(!a.operators().empty() &&
                a.operators().find_first_not_of("+-") == std::string::npos,
            p + "operators", "a non-empty string of \"+\" and \"-\"",
            absl::StrCat("\"", a.operators(), "\""));
  c.AtLeast(p + "num_problems", a.num_problems(), 2);
  c.OpenUnit(p + "eval_fraction", a.eval_fraction());
}

void CheckOptimizer(const std::string& p, const v1::OptimizerConfig& o, Checker& c) {
  c.Require(o.momentum() >= 0 && o.momentum() < 1, p + "momentum", "in [0, 1)", o.momentum());
  c.PositiveAtMost(p + "lr", o.lr(), 1.0f);
  c.Require(o.beta1() >= 0 && o.beta1() < 1, p + "beta1", "in [0, 1)", o.beta1());
  c.Require(o.beta2() >= 0 && o.beta2() < 1, p + "beta2", "in [0, 1)", o.beta2());
  c.PositiveAtMost(p + "eps", o.eps(), 1.0f);
  c.Within(p + "weight_decay", o.weight_decay(), 0.0f, 1.0f);
  c.Within(p + "max_grad_norm", o.max_grad_norm(), 0.0f, 1e6f);
  c.AtLeast(p + "warmup_steps", o.warmup_steps(), 0);
}

void CheckPpo(const v1::JobConfig& job, Checker& c) {
  const v1::PpoConfig& p = job.ppo();
  c.Require(p.gamma() >= 0 && p.gamma() <= 1, "ppo.gamma", "in [0, 1]", p.gamma());
  c.Require(p.lam() >= 0 && p.lam() <= 1, "ppo.lam", "in [0, 1]", p.lam());
  c.Within("ppo.vf_coef", p.vf_coef(), 0.0f, 1e3f);
  c.NonNegative("ppo.value_clip", p.value_clip());
  if (p.reward() == v1::PpoConfig::REWARD_MODEL) {
    c.Require(!p.reward_model_path().empty(), "ppo.reward_model_path",
              "set when ppo.reward is reward_model", "\"\"");
  }
  CheckOptimizer("ppo.critic_optimizer.", p.critic_optimizer(), c);
  const v1::GrpoConfig& g = job.grpo();
  c.Require(g.advantage_estimator() == v1::GrpoConfig::GRPO, "grpo.advantage_estimator",
            "grpo (the default) with algorithm ppo, whose critic gives the advantages",
            ChoiceName(g.advantage_estimator()));
  c.Require(!g.dapo().dynamic_sampling(), "grpo.dapo.dynamic_sampling",
            "false with algorithm ppo", "true");
}

void CheckRl(const v1::JobConfig& job, Checker& c) {
  const v1::SamplingConfig& s = job.sampling();
  c.Within("sampling.temperature", s.temperature(), 1e-3f, 100.0f);
  c.Require(s.top_p() > 0 && s.top_p() <= 1, "sampling.top_p", "in (0, 1]", s.top_p());
  c.AtLeast("sampling.max_new_tokens", s.max_new_tokens(), 1);
  c.NonNegative("sampling.decode_token_budget", s.decode_token_budget());
  c.Require(s.max_new_tokens() < job.model().max_seq_len(), "sampling.max_new_tokens",
            absl::StrCat("< model.max_seq_len (", job.model().max_seq_len(),
                         ") to leave room for the prompt"),
            s.max_new_tokens());

  const v1::VerifierConfig& v = job.verifier();
  c.Require(!v.name().empty(), "verifier.name", "a registered verifier name", "\"\"");
  c.NonNegative("verifier.tolerance", v.tolerance());
  c.AtLeast("verifier.workers", v.workers(), 1);
  c.AtLeast("verifier.deadline_ms", v.deadline_ms(), 1);
  c.NonNegative("verifier.retries", v.retries());
  c.AtLeast("verifier.cpu_seconds", v.cpu_seconds(), 1);
  c.AtLeast("verifier.memory_mb", v.memory_mb(), 16);
  c.AtLeast("verifier.max_processes", v.max_processes(), 1);
  c.NonNegative("verifier.max_file_mb", v.max_file_mb());
  c.NonNegative("verifier.cache_entries", v.cache_entries());
  c.NonNegative("verifier.breaker_failures", v.breaker_failures());
  c.AtLeast("verifier.breaker_pause_ms", v.breaker_pause_ms(), 1);

  const v1::SftConfig& sft = job.sft();
  c.NonNegative("sft.steps", sft.steps());
  c.AtLeast("sft.batch_size", sft.batch_size(), 1);
  c.AtLeast("sft.num_examples", sft.num_examples(), 0);
  c.Require(sft.target_accuracy() >= 0 && sft.target_accuracy() <= 1, "sft.target_accuracy",
            "in [0, 1]", sft.target_accuracy());
  CheckOptimizer("sft.optimizer.", sft.optimizer(), c);

  const v1::GrpoConfig& g = job.grpo();
  c.NonNegative("grpo.steps", g.steps());
  c.AtLeast("grpo.prompts_per_step", g.prompts_per_step(), 1);
  // PPO's critic is its baseline: one response per prompt is enough.
  c.AtLeast("grpo.responses_per_prompt", g.responses_per_prompt(),
            RecipeOf(job) == Recipe::kPpo ? 1 : 2);
  c.AtLeast("grpo.micro_batch_size", g.micro_batch_size(), 1);
  c.OpenUnit("grpo.clip_eps", g.clip_eps());
  c.Within("grpo.kl_coef", g.kl_coef(), 0.0f, 1e3f);
  c.Require(g.loss_aggregation() != v1::LOSS_AGGREGATION_UNSPECIFIED,
            "grpo.loss_aggregation", "token_mean or sequence_mean",
            ChoiceName(g.loss_aggregation()));
  CheckOptimizer("grpo.optimizer.", g.optimizer(), c);
  const v1::DapoConfig& d = g.dapo();
  c.Require(d.clip_eps_low() >= 0 && d.clip_eps_low() < 1, "grpo.dapo.clip_eps_low",
            "in [0, 1) (0: grpo.clip_eps)", d.clip_eps_low());
  c.Require(d.clip_eps_high() >= 0 && d.clip_eps_high() <= 10, "grpo.dapo.clip_eps_high",
            "in [0, 10] (0: grpo.clip_eps)", d.clip_eps_high());
  c.AtLeast("grpo.dapo.max_sampling_rounds", d.max_sampling_rounds(), 1);
  if (RecipeOf(job) == Recipe::kPpo) CheckPpo(job, c);
}

void CheckDeployment(const v1::DeploymentConfig& d, Checker& c) {
  c.AtLeast("deployment.actor.count", d.actor().count(), 1);
  // Learners train each batch together (memory.zero_stage); one reference
  // and one verifier worker: the loop drives one of each.
  c.AtLeast("deployment.learner.count", d.learner().count(), 1);
  for (const auto& [name, role] : {std::pair{"reference", &d.reference()},
                                   std::pair{"verifier", &d.verifier()}}) {
    c.Require(role->count() == 1, absl::StrCat("deployment.", name, ".count"), "1",
              role->count());
  }
  for (const auto& [name, role] : {std::pair{"actor", &d.actor()},
                                   std::pair{"learner", &d.learner()},
                                   std::pair{"reference", &d.reference()},
                                   std::pair{"verifier", &d.verifier()}}) {
    c.NonNegative(absl::StrCat("deployment.", name, ".gpus_per_worker"), role->gpus_per_worker());
    c.Require(!role->pool().empty(), absl::StrCat("deployment.", name, ".pool"), "a pool name",
              "\"\"");
  }
  const std::string& t = d.weight_transport();
  c.Require(t == "gloo" || t == "tcp" || t == "grpc" || t == "nccl" || t == "cuda_ipc",
            "deployment.weight_transport", "one of gloo, tcp, grpc, nccl, cuda_ipc",
            absl::StrCat("\"", t, "\""));
  c.Positive("deployment.bucket_bytes", d.bucket_bytes());
  c.Positive("deployment.heartbeat_interval_ms", d.heartbeat_interval_ms());
  c.Require(d.heartbeat_timeout_ms() > d.heartbeat_interval_ms(),
            "deployment.heartbeat_timeout_ms", "> deployment.heartbeat_interval_ms",
            d.heartbeat_timeout_ms());
  c.Positive("deployment.call_timeout_ms", d.call_timeout_ms());
  c.Require(d.stall_timeout_ms() >= d.heartbeat_timeout_ms(), "deployment.stall_timeout_ms",
            ">= deployment.heartbeat_timeout_ms", d.stall_timeout_ms());
  c.Require(d.max_restarts() >= 0 && d.max_restarts() <= 100, "deployment.max_restarts",
            "in [0, 100]", d.max_restarts());
}

void CheckMemory(const v1::MemoryConfig& m, Checker& c) {
  const v1::LoraConfig& lora = m.lora();
  c.NonNegative("memory.lora.rank", lora.rank());
  c.PositiveAtMost("memory.lora.alpha", lora.alpha(), 1e4f);
  c.Distinct("memory.lora.target_modules",
             std::vector<int>(lora.target_modules().begin(), lora.target_modules().end()),
             [](int t) { return ChoiceName(static_cast<v1::LoraConfig::Projection>(t)); });
}

// LoRA adapts the policy's projections; a reward model's score head is new
// and would stay frozen at its random start. Actors build the fp32 base
// themselves, so a learner computing with a bf16-rounded base would train
// adapters for another model.
void CheckLora(const v1::JobConfig& job, Checker& c) {
  if (job.memory().lora().rank() == 0) return;
  c.Require(RecipeOf(job) != Recipe::kRewardModel, "memory.lora.rank",
            "0 with algorithm reward_model (LoRA would freeze its new score head)",
            job.memory().lora().rank());
  c.Require(job.memory().precision() == v1::MemoryConfig::FP32, "memory.precision",
            "fp32 with memory.lora (bf16 LoRA is not supported yet)",
            ChoiceName(job.memory().precision()));
  // A mixture of experts takes adapters on its attention projections only.
  for (const int t : job.memory().lora().target_modules()) {
    const auto p = static_cast<v1::LoraConfig::Projection>(t);
    c.Require(job.model().num_experts() == 0 || p == v1::LoraConfig::Q_PROJ ||
                  p == v1::LoraConfig::K_PROJ || p == v1::LoraConfig::V_PROJ ||
                  p == v1::LoraConfig::O_PROJ,
              "memory.lora.target_modules",
              "attention projections only (q_proj, k_proj, v_proj, o_proj) when model.num_experts "
              "> 0 (no adapters on experts)",
              ChoiceName(p));
  }
}

void CheckPreference(const v1::JobConfig& job, Checker& c) {
  const v1::DpoConfig& d = job.dpo();
  c.NonNegative("dpo.steps", d.steps());
  c.AtLeast("dpo.batch_size", d.batch_size(), 1);
  c.PositiveAtMost("dpo.beta", d.beta(), 1e3f);
  CheckOptimizer("dpo.optimizer.", d.optimizer(), c);
  c.AtLeast("dpo.responses_per_prompt", d.responses_per_prompt(), 2);
  c.NonNegative("dpo.eval_every", d.eval_every());
  c.NonNegative("dpo.eval_pairs", d.eval_pairs());
  const v1::RewardModelConfig& rm = job.reward_model();
  c.NonNegative("reward_model.steps", rm.steps());
  c.AtLeast("reward_model.batch_size", rm.batch_size(), 1);
  CheckOptimizer("reward_model.optimizer.", rm.optimizer(), c);
  c.NonNegative("reward_model.eval_every", rm.eval_every());
  c.NonNegative("reward_model.eval_pairs", rm.eval_pairs());
  const v1::DataConfig& data = job.data();
  const bool preference_files =
      !data.preference_train_path().empty() || !data.preference_eval_path().empty();
  if (preference_files) {
    const std::optional<Recipe> recipe = RecipeOf(job);
    c.Require(recipe == Recipe::kDpo || recipe == Recipe::kRewardModel,
              "data.preference_train_path",
              "empty unless algorithm is dpo or reward_model (only they read preference pairs)",
              absl::StrCat("\"", data.preference_train_path(), "\" with algorithm \"",
                           job.algorithm(), "\""));
    c.Require(!data.preference_train_path().empty() && !data.preference_eval_path().empty(),
              "data.preference_eval_path",
              "set together with data.preference_train_path (held-out pairs to measure)",
              absl::StrCat("train \"", data.preference_train_path(), "\", eval \"",
                           data.preference_eval_path(), "\""));
  }
  const std::optional<Recipe> recipe = RecipeOf(job);
  if (recipe != Recipe::kGrpo && recipe != Recipe::kPpo) {
    c.Require(job.runtime().checkpoint_every() == 0, "runtime.checkpoint_every",
              absl::StrCat("0 with algorithm ", job.algorithm(),
                           " (checkpoint and resume are GRPO's and PPO's so far)"),
              job.runtime().checkpoint_every());
  }
}

void CheckAsync(const v1::JobConfig& job, Checker& c) {
  const v1::AsyncConfig& a = job.async();
  c.Within("async.max_staleness", a.max_staleness(), 0, 8);
  c.Within("async.importance_weight_cap", a.importance_weight_cap(), 1.0, 100.0);
  c.Within("async.rollout_overdraw", a.rollout_overdraw(), 0.0, 4.0);
  const std::optional<Recipe> recipe = RecipeOf(job);
  if (a.partial_rollout() != v1::AsyncConfig::FINISH) {
    const std::string mode =
        absl::AsciiStrToLower(v1::AsyncConfig::PartialRollout_Name(a.partial_rollout()));
    const auto refuse = [&](bool bad, absl::string_view why) {
      c.Require(!bad, "async.partial_rollout", absl::StrCat("finish ", why), mode);
    };
    refuse(!a.enabled(), "unless async.enabled (partial rollout carries groups between the "
                         "asynchronous pipeline's rollouts)");
    refuse(a.partial_rollout() == v1::AsyncConfig::CONTINUE && a.max_staleness() < 2,
           "or requeue when async.max_staleness < 2 (continue runs the actors one step ahead "
           "and carries a response at most max_staleness - 1 steps)");
    refuse(recipe != Recipe::kGrpo && recipe != Recipe::kPpo, "unless the algorithm is grpo or ppo");
    refuse(!job.environment().name().empty(),
           "with an environment (an episode's turns are not paused between steps)");
    refuse(job.grpo().dapo().dynamic_sampling(), "with grpo.dapo.dynamic_sampling");
    refuse(job.grpo().routing_replay(),
           "with grpo.routing_replay (a resumed response's routing is recomputed)");
  }
  if (!a.enabled()) return;
  c.Require(recipe == Recipe::kGrpo || recipe == Recipe::kPpo || recipe == Recipe::kOnlineDpo,
            "async.enabled",
            "false unless the algorithm samples (grpo, ppo or online_dpo: the asynchronous "
            "pipeline runs the recipes that generate their own samples)",
            absl::StrCat("true with algorithm \"", job.algorithm(), "\""));
}

// Multi-turn rollouts (docs/multi-turn.md); nothing to check without an
// environment.
void CheckEnvironment(const v1::JobConfig& job, Checker& c) {
  const v1::EnvironmentConfig& e = job.environment();
  if (e.name().empty()) return;
  c.Require(!e.turn_stop().empty(), "environment.turn_stop",
            "set with an environment (the string that ends a policy turn)", "\"\"");
  c.AtLeast("environment.max_turns", e.max_turns(), 1);
  c.AtLeast("environment.workers", e.workers(), 1);
  c.Positive("environment.call_deadline_ms", e.call_deadline_ms());
  c.Positive("environment.episode_deadline_ms", e.episode_deadline_ms());
  c.NonNegative("environment.max_turn_tokens", e.max_turn_tokens());
  c.Require(e.max_tokens() >= 0 && e.max_tokens() <= job.model().max_seq_len(),
            "environment.max_tokens",
            absl::StrCat("in [0, model.max_seq_len ", job.model().max_seq_len(),
                         "] (0: model.max_seq_len)"),
            e.max_tokens());
  c.Require(std::isfinite(e.failure_reward()), "environment.failure_reward", "finite",
            e.failure_reward());
}

// algorithm distill: a teacher with weights that holds the student's
// sequences, and a loss that trains.
void CheckDistill(const v1::JobConfig& job, Checker& c) {
  if (RecipeOf(job) != Recipe::kDistill) return;
  const v1::DistillConfig& d = job.distill();
  const v1::ModelConfig& t = d.teacher();
  c.Require(!t.path().empty() || !t.init_checkpoint().empty(), "distill.teacher",
            "given path (a Hugging Face directory) or init_checkpoint (a Trellis safetensors file)",
            "neither");
  CheckModel("distill.teacher.", t, c);
  c.Require(t.max_seq_len() >= job.model().max_seq_len(), "distill.teacher.max_seq_len",
            absl::StrCat(">= model.max_seq_len (", job.model().max_seq_len(),
                         "): the teacher scores the student's sequences"),
            t.max_seq_len());
  c.OpenUnit("distill.jsd_beta", d.jsd_beta());
  c.NonNegative("distill.divergence_weight", d.divergence_weight());
  c.NonNegative("distill.reward_weight", d.reward_weight());
  c.Require(d.divergence_weight() > 0 || d.reward_weight() > 0, "distill.divergence_weight",
            "> 0 or distill.reward_weight > 0 (with both 0 the loss trains nothing)",
            d.divergence_weight());
}

// observe.mlflow (docs/observe.md): a server's address and an experiment.
void CheckObserve(const v1::MlflowConfig& m, Checker& c) {
  if (m.uri().empty()) return;
  c.Require(ParseHttpUri(m.uri()).ok(), "observe.mlflow.uri",
            "http://host:port or https://host:port", absl::StrCat("\"", m.uri(), "\""));
  c.Require(!m.experiment().empty(), "observe.mlflow.experiment", "a name with a uri", "\"\"");
}

}  // namespace

absl::Status ValidateJob(const v1::JobConfig& job) {
  Checker c;
  CheckModel("model.", job.model(), c);
  CheckDistill(job, c);
  CheckArithmetic(job.data().arithmetic(), c);
  CheckRl(job, c);
  CheckPreference(job, c);
  CheckAsync(job, c);
  CheckEnvironment(job, c);
  internal::CheckRoutingReplay(job, c);
  c.NonNegative("eval.num_prompts", job.eval().num_prompts());
  c.AtLeast("eval.batch_size", job.eval().batch_size(), 1);
  c.NonNegative("eval.verify_retries", job.eval().verify_retries());
  c.NonNegative("runtime.num_threads", job.runtime().num_threads());
  c.NonNegative("runtime.checkpoint_every", job.runtime().checkpoint_every());
  CheckDeployment(job.deployment(), c);
  CheckMemory(job.memory(), c);
  internal::CheckParallelism(job, c);
  CheckLora(job, c);
  CheckObserve(job.observe().mlflow(), c);
  internal::CheckLimits(job, c);
  internal::CheckStrings(job, c);
  return c.status();
}

absl::Status ValidateEmbeddedJob(const v1::JobConfig& job) {
  Checker c;
  c.Require(job.sampling().concurrency() != v1::SamplingConfig::AUTO, "sampling.concurrency",
            "fixed in an embedded run (`trellis run`: its one in-process actor decodes at "
            "sampling.decode_token_budget; auto sizes the actor pool of `trellis launch`)",
            ChoiceName(job.sampling().concurrency()));
  return c.status();
}

absl::Status ValidateLaunchDevices(const v1::JobConfig& job, const std::vector<v1::Role>& roles) {
  Checker c;
  const v1::DeploymentConfig& d = job.deployment();
  const auto deployment = [&d](v1::Role role) -> const v1::RoleDeployment& {
    return role == v1::ACTOR ? d.actor() : role == v1::LEARNER ? d.learner() : d.reference();
  };
  if (job.runtime().device() == v1::RuntimeConfig::CUDA) {
    for (const v1::Role role : roles) {
      c.Require(deployment(role).gpus_per_worker() >= 1,
                absl::StrCat("deployment.", ChoiceName(role), ".gpus_per_worker"),
                ">= 1 with runtime.device cuda (a launched worker computes on its own GPU)",
                deployment(role).gpus_per_worker());
    }
  }
  if (d.placement() == v1::DeploymentConfig::COLOCATED && !roles.empty()) {
    const v1::Role first = roles.front();
    const std::string first_name = ChoiceName(first);
    for (const v1::Role role : roles) {
      const std::string path = absl::StrCat("deployment.", ChoiceName(role));
      c.Require(deployment(role).pool() == deployment(first).pool(), path + ".pool",
                absl::StrCat("deployment.", first_name, ".pool (\"", deployment(first).pool(),
                             "\") with placement colocated"),
                absl::StrCat("\"", deployment(role).pool(), "\""));
      c.Require(deployment(role).gpus_per_worker() == deployment(first).gpus_per_worker(),
                path + ".gpus_per_worker",
                absl::StrCat("deployment.", first_name, ".gpus_per_worker (",
                             deployment(first).gpus_per_worker(), ") with placement colocated"),
                deployment(role).gpus_per_worker());
    }
  }
  return c.status();
}

}  // namespace trellis::config
