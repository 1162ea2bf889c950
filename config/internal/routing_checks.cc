#include "config/internal/routing_checks.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "config/recipe.h"

namespace trellis::config::internal {

void CheckRoutingReplay(const v1::JobConfig& job, Checker& c) {
  if (!job.grpo().routing_replay()) return;
  const v1::ModelConfig& m = job.model();
  c.Require(m.num_experts() > 0, "grpo.routing_replay",
            "false for a dense model (model.num_experts 0: no experts to replay)", "true");
  c.Require(m.num_experts() <= 256, "model.num_experts",
            "<= 256 with grpo.routing_replay (a record holds an expert in one byte)",
            m.num_experts());
  const std::optional<Recipe> recipe = RecipeOf(job);
  c.Require(recipe == Recipe::kGrpo, "grpo.routing_replay",
            "false unless algorithm is grpo (the objective that replays the records)",
            absl::StrCat("true with algorithm \"", job.algorithm(), "\""));
  c.Require(job.environment().name().empty(), "grpo.routing_replay",
            "false with an environment (multi-turn episodes do not record routing yet)",
            absl::StrCat("true with environment \"", job.environment().name(), "\""));
}

}  // namespace trellis::config::internal
