#include "config/internal/parallel_checks.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "config/recipe.h"

namespace trellis::config::internal {
namespace {

// A tensor-parallel group of `k` splits every block's query heads, its
// key/value heads and its MLP's columns into k equal parts.
void CheckSplits(const std::string& path, int k, const v1::ModelConfig& m, Checker& c) {
  if (k <= 1) return;
  c.Require(m.num_experts() == 0, path,
            "1 for a mixture of experts (its experts are not split yet)", k);
  for (const auto& [field, value] : {std::pair{"n_heads", m.n_heads()},
                                     std::pair{"n_kv_heads", m.n_kv_heads()},
                                     std::pair{"d_ff", m.d_ff()}}) {
    c.Require(value % k == 0, path,
              absl::StrCat("a divisor of the model's ", field, " (", value, ")"), k);
  }
}

}  // namespace

void CheckParallelism(const v1::JobConfig& job, Checker& c) {
  const v1::MemoryConfig& memory = job.memory();
  c.Require(memory.zero_stage() >= 0 && memory.zero_stage() <= 3, "memory.zero_stage",
            "0, 1, 2 or 3", memory.zero_stage());
  c.NonNegative("memory.process_memory_limit_bytes", memory.process_memory_limit_bytes());
  const v1::DeploymentConfig& d = job.deployment();
  // A shared critic's values are computed before the update, outside the
  // gathers that stage 3 runs across the learner ranks.
  const bool shared_critic = RecipeOf(job) == Recipe::kPpo &&
                             job.ppo().critic() == v1::PpoConfig::SHARED;
  c.Require(!shared_critic || memory.zero_stage() < 3 || d.learner().count() <= 1, "ppo.critic",
            "separate under memory.zero_stage 3 with more than one learner (or use zero_stage 2)",
            "shared");
  for (const auto& [name, role] : {std::pair{"learner", &d.learner()},
                                   std::pair{"verifier", &d.verifier()}}) {
    c.Require(role->tensor_parallel() == 1, absl::StrCat("deployment.", name, ".tensor_parallel"),
              "1 (only the actor and the reference split their model)", role->tensor_parallel());
  }
  const int actor_k = d.actor().tensor_parallel();
  c.Require(actor_k >= 1 && actor_k <= 64, "deployment.actor.tensor_parallel", "in [1, 64]",
            actor_k);
  CheckSplits("deployment.actor.tensor_parallel", actor_k, job.model(), c);
  const int reference_k = d.reference().tensor_parallel();
  c.Require(reference_k >= 1 && reference_k <= 64, "deployment.reference.tensor_parallel",
            "in [1, 64]", reference_k);
  CheckSplits("deployment.reference.tensor_parallel", reference_k, ReferenceModel(job), c);
}

}  // namespace trellis::config::internal
