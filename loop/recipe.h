#ifndef TRELLIS_LOOP_RECIPE_H_
#define TRELLIS_LOOP_RECIPE_H_

// A recipe as a plug-in: what one training algorithm (JobConfig.algorithm)
// brings to the shared run (loop/driver.h), registered by name like the
// verifiers. Each recipe lives in a file of its own under loop/recipes/ and
// registers through one line of loop/recipes/builtin.cc.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ledger/ledger.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/scheduler.pb.h"

namespace trellis::loop {

class Driver;

// One run of a recipe: the parts of the run that are its own. The driver
// calls Prepare, Evaluate("before"), then Step for every step (closing each
// in the ledger and syncing weights when the recipe rolls out), Evaluate
// every eval_every() steps and Evaluate("after").
class Recipe {
 public:
  virtual ~Recipe() = default;
  // Before the "before" evaluation of a fresh run (a resumed run skips it):
  // a warm-up, the frozen reference, a dataset of pairs.
  [[nodiscard]] virtual absl::Status Prepare() = 0;
  // A held-out evaluation named `label` ("before", "step_<N>", "after"),
  // recorded in the ledger.
  [[nodiscard]] virtual absl::StatusOr<ledger::EvalMetrics> Evaluate(const std::string& label) = 0;
  // One optimizer step. `counts` comes with step and policy_version set;
  // the step fills in what it counted.
  [[nodiscard]] virtual absl::Status Step(int64_t step, ledger::StepCounts& counts) = 0;
  // The progress line once `step` closed with `metrics`; "" for none.
  virtual std::string Progress(int64_t step, const ledger::StepCounts& counts,
                               const ledger::StepMetrics& metrics) const = 0;
  // Held-out evaluations between steps: every this many (0: none).
  virtual int64_t eval_every() const { return 0; }
  // The target metric before and after, one line for the summary table.
  virtual std::string Headline(const ledger::EvalMetrics& before,
                               const ledger::EvalMetrics& after) const = 0;
};

// What the registry knows of a recipe before any run: the roles it calls,
// how many steps it runs, and how to make one.
struct RecipeSpec {
  // Samples from the actors and asks the verifier each step (the driver
  // syncs weights after it); false: trains on fixed data, and a launched
  // job starts no actor and no verifier.
  bool rolls_out = true;
  // Whether a run of `job` calls the reference role.
  std::function<bool(const v1::JobConfig& job)> needs_reference;
  // The optimizer steps a run of `job` takes (the field that counts them).
  std::function<int64_t(const v1::JobConfig& job)> steps;
  // Makes the recipe of one run; it may keep `driver` (which outlives it).
  std::function<absl::StatusOr<std::unique_ptr<Recipe>>(Driver& driver)> create;
};

class RecipeRegistry {
 public:
  // AlreadyExists when `name` is taken; InvalidArgument for an empty name
  // or a spec without steps, needs_reference or create.
  [[nodiscard]] absl::Status Register(const std::string& name, RecipeSpec spec);
  // InvalidArgument naming the registered recipes when `name` is unknown.
  [[nodiscard]] absl::StatusOr<const RecipeSpec*> Find(std::string_view name) const;
  // The registered names, in registration order.
  std::vector<std::string> names() const;

 private:
  std::vector<std::pair<std::string, RecipeSpec>> specs_;
};

// Registers every built-in recipe (loop/recipes/builtin.cc).
[[nodiscard]] absl::Status RegisterBuiltinRecipes(RecipeRegistry& registry);

// A registry holding the built-ins, made by RegisterBuiltinRecipes on first
// use.
const RecipeRegistry& BuiltinRecipes();

// What the built-in registry says of a job's recipe. CheckRecipe fails with
// InvalidArgument ("algorithm: must be one of ...") when job.algorithm names
// none; the others REQUIRE that it passed.
[[nodiscard]] absl::Status CheckRecipe(const v1::JobConfig& job);

// Makes a job ready to run, plan, place or serve, the same way everywhere
// (`trellis resolve`, `plan`, `place`, `run`, `launch` and the scheduler):
// its model's shape from model.path (model::ResolveHfModel; a distill
// teacher's from distill.teacher.path), then
// config::ValidateJob, then CheckRecipe, then the verifier's kind and what
// it requires (verifier::ProcessVerifiers, VerifierRegistry::Check: a
// known name, a remote verifier's address, ...; nothing started), then
// model.vocab_size and a distill teacher's against the tokenizer's
// vocabulary (PromptFormat::ForJob), then config::CheckJobFitsMemory
// against this machine's memory. Reads no data and allocates nothing of
// the job's size.
[[nodiscard]] absl::Status PrepareJob(v1::JobConfig* job);
// Whether the job's recipe calls the reference role.
bool NeedsReference(const v1::JobConfig& job);
// How many workers of `role` a launched job starts: deployment.<role>.count,
// or 0 for a role its recipe never calls (the reference without
// NeedsReference; the actors and the verifier of a recipe that does not
// roll out) and for the scheduler, which is no worker.
int WorkersNeeded(const v1::JobConfig& job, v1::Role role);
// The optimizer steps the job's recipe runs (an SFT warm-up's not counted).
int64_t RecipeSteps(const v1::JobConfig& job);
// Whether the job's recipe rolls out (RecipeSpec::rolls_out).
bool RollsOut(const v1::JobConfig& job);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_RECIPE_H_
