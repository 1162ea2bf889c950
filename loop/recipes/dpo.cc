// DPO (algorithm "dpo"): preference steps on a fixed dataset of pairs
// against the frozen reference (the initial policy). The reference scores
// every pair once before training (dpo.reference_logprobs "cached") or the
// pairs of each step and evaluation as they are used ("on_the_fly"), one
// pair per request, so a pair's reference log-probs do not depend on what
// else is in a batch: both give the same numbers.

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/worker_id.h"
#include "loop/loop_util.h"
#include "loop/pair_training.h"
#include "loop/recipes/builtin.h"

namespace trellis::loop {
namespace {

using ledger::Stage;

// dpo.reference_logprobs "cached" (else "on_the_fly").
bool CachesReference(const v1::JobConfig& job) {
  return job.dpo().reference_logprobs() == v1::DpoConfig::CACHED;
}

class Dpo final : public PairRecipe {
 public:
  explicit Dpo(Driver& driver)
      : PairRecipe(driver, {driver.job().dpo().steps(), driver.job().dpo().batch_size(),
                            driver.job().dpo().eval_every(), driver.job().dpo().eval_pairs()}) {}

  absl::Status Prepare() override {
    if (driver_.roles().reference == nullptr) {
      return absl::FailedPreconditionError("the dpo job needs a reference role");
    }
    if (absl::Status s = PairRecipe::Prepare(); !s.ok()) return s;
    if (absl::Status s = driver_.TakeReference(); !s.ok()) return s;
    if (!CachesReference(driver_.job())) return absl::OkStatus();
    auto span =
        driver_.ledger().Begin(Stage::kReferenceCache, config::WorkerId(v1::REFERENCE).ToString());
    std::vector<v1::PreferencePair*> all;
    for (auto* pairs : {&train_pairs_, &eval_pairs_}) {
      for (v1::PreferencePair& p : *pairs) all.push_back(&p);
    }
    if (absl::Status s = ScorePairs(all); !s.ok()) return At(s, "caching reference log-probs");
    span.End();
    driver_.Print(absl::StrCat("reference log-probs of ", all.size(), " pairs cached\n"));
    return absl::OkStatus();
  }

 private:
  absl::Status BeforeUse(std::vector<v1::PreferencePair*> pairs, bool eval) override {
    if (CachesReference(driver_.job())) return absl::OkStatus();
    auto span =
        driver_.ledger().Begin(Stage::kReference, config::WorkerId(v1::REFERENCE).ToString());
    return ScorePairs(std::move(pairs));
  }

  // Fills the reference log-prob sums of every pair in `pairs`, one pair
  // per request.
  absl::Status ScorePairs(std::vector<v1::PreferencePair*> pairs) {
    for (v1::PreferencePair* pair : pairs) {
      v1::LogProbRequest request;
      for (const auto* response : {&pair->chosen_tokens(), &pair->rejected_tokens()}) {
        v1::Sample* s = request.add_samples();
        *s->mutable_prompt_tokens() = pair->prompt_tokens();
        *s->mutable_response_tokens() = *response;
      }
      absl::StatusOr<v1::LogProbResponse> ref = driver_.roles().reference->LogProbs(request);
      if (!ref.ok()) return At(ref.status(), "reference");
      if (ref->sequences_size() != 2) {
        return absl::InternalError(
            absl::StrCat("reference: ", ref->sequences_size(), " log-prob rows for 2 responses"));
      }
      pair->set_ref_chosen_logprob(SumLogProbs(ref->sequences(0).logprobs()));
      pair->set_ref_rejected_logprob(SumLogProbs(ref->sequences(1).logprobs()));
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::Status RegisterDpo(RecipeRegistry& registry) {
  RecipeSpec spec;
  spec.rolls_out = false;
  spec.needs_reference = [](const v1::JobConfig&) { return true; };
  spec.steps = [](const v1::JobConfig& job) { return job.dpo().steps(); };
  spec.create = [](Driver& driver) -> absl::StatusOr<std::unique_ptr<Recipe>> {
    return std::make_unique<Dpo>(driver);
  };
  return registry.Register("dpo", std::move(spec));
}

}  // namespace trellis::loop
