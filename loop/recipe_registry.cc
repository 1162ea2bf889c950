#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/job_config.h"
#include "config/job_size.h"
#include "config/recipe.h"
#include "loop/prompt_format.h"
#include "loop/recipe.h"
#include "model/hf_config.h"
#include "verifier/verifier.h"

namespace trellis::loop {

absl::Status RecipeRegistry::Register(const std::string& name, RecipeSpec spec) {
  if (name.empty()) return absl::InvalidArgumentError("recipe name is empty");
  if (!spec.steps || !spec.needs_reference || !spec.create) {
    return absl::InvalidArgumentError(
        absl::StrCat("recipe \"", name, "\": steps, needs_reference and create are required"));
  }
  for (const auto& [taken, unused] : specs_) {
    if (taken == name) {
      return absl::AlreadyExistsError(absl::StrCat("recipe \"", name, "\" is already registered"));
    }
  }
  specs_.emplace_back(name, std::move(spec));
  return absl::OkStatus();
}

absl::StatusOr<const RecipeSpec*> RecipeRegistry::Find(std::string_view name) const {
  for (const auto& [registered, spec] : specs_) {
    if (registered == name) return &spec;
  }
  return absl::InvalidArgumentError(absl::StrCat("algorithm: must be one of ",
                                                 absl::StrJoin(names(), ", "), ", found \"",
                                                 std::string(name), "\""));
}

std::vector<std::string> RecipeRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, spec] : specs_) out.push_back(name);
  return out;
}

const RecipeRegistry& BuiltinRecipes() {
  static const RecipeRegistry* const registry = [] {
    auto* r = new RecipeRegistry;
    // The built-ins' names are distinct and their specs complete.
    if (!RegisterBuiltinRecipes(*r).ok()) std::abort();
    return r;
  }();
  return *registry;
}

namespace {

// The job's spec. REQUIRES: CheckRecipe(job) passed.
const RecipeSpec& SpecOf(const v1::JobConfig& job) {
  absl::StatusOr<const RecipeSpec*> spec = BuiltinRecipes().Find(job.algorithm());
  if (!spec.ok()) std::abort();
  return **spec;
}

}  // namespace

absl::Status CheckRecipe(const v1::JobConfig& job) {
  return BuiltinRecipes().Find(job.algorithm()).status();
}

namespace {

// Every id the job's tokenizer makes indexes the models' embeddings
// (model.vocab_size, 0: the tokenizer's size); a distill teacher has the
// student's vocabulary (distill.teacher.vocab_size, 0: the tokenizer's
// size), so that their log-probs are of the same tokens.
absl::Status CheckVocabulary(const v1::JobConfig& job) {
  absl::StatusOr<std::unique_ptr<PromptFormat>> format = PromptFormat::ForJob(job);
  if (!format.ok()) return format.status();
  const int64_t tokenizer = (*format)->tokenizer().vocab_size();
  const int64_t vocab = job.model().vocab_size();
  if (vocab != 0 && vocab < tokenizer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.vocab_size: must be >= the size of the tokenizer's vocabulary (", tokenizer, ", ",
        job.model().path().empty() ? "the built-in character tokenizer"
                                   : "the tokenizer of model.path",
        "; 0 takes it), found ", vocab));
  }
  if (!config::ReferenceIsTeacher(job)) return absl::OkStatus();
  const int64_t student = vocab != 0 ? vocab : tokenizer;
  const int64_t teacher = job.distill().teacher().vocab_size();
  if (teacher == 0 || teacher == student) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "distill.teacher.vocab_size: must equal the student's vocabulary (", student,
      ": the teacher shares the student's tokenizer; 0 takes it), found ", teacher));
}

}  // namespace

absl::Status PrepareJob(v1::JobConfig* job) {
  if (absl::Status s = model::ResolveHfModel(job->mutable_model()); !s.ok()) return s;
  if (config::ReferenceIsTeacher(*job)) {
    absl::Status s = model::ResolveHfModel(job->mutable_distill()->mutable_teacher());
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("distill.teacher: ", s.message()));
  }
  if (absl::Status s = config::ValidateJob(*job); !s.ok()) return s;
  if (absl::Status s = CheckRecipe(*job); !s.ok()) return s;
  absl::StatusOr<verifier::VerifierRegistry> verifiers = verifier::ProcessVerifiers();
  if (!verifiers.ok()) return verifiers.status();
  if (absl::Status s = verifiers->Check(job->verifier()); !s.ok()) return s;
  if (absl::Status s = CheckVocabulary(*job); !s.ok()) return s;
  return config::CheckJobFitsMemory(*job, config::MachineMemoryBytes());
}

bool NeedsReference(const v1::JobConfig& job) { return SpecOf(job).needs_reference(job); }

int64_t RecipeSteps(const v1::JobConfig& job) { return SpecOf(job).steps(job); }

bool RollsOut(const v1::JobConfig& job) { return SpecOf(job).rolls_out; }

int WorkersNeeded(const v1::JobConfig& job, v1::Role role) {
  const v1::DeploymentConfig& d = job.deployment();
  switch (role) {
    case v1::LEARNER: return d.learner().count();
    case v1::REFERENCE: return NeedsReference(job) ? d.reference().count() : 0;
    case v1::ACTOR: return RollsOut(job) ? d.actor().count() : 0;
    case v1::VERIFIER: return RollsOut(job) ? d.verifier().count() : 0;
    default: return 0;
  }
}

}  // namespace trellis::loop
