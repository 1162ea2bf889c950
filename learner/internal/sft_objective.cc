// SFT: cross-entropy on the target tokens (prompt tokens masked), token
// mean over the whole batch, with teacher-forced exact match.

#include <memory>
#include <vector>

#include "learner/internal/objective.h"
#include "learner/objectives.h"
#include "model/token_batch.h"

namespace trellis::learner::internal {
namespace {

class SftObjective : public Objective {
 public:
  SftObjective(const ObjectiveInput& in, const v1::SftBatch& batch) : in_(in), batch_(batch) {
    double total_tokens = 0;
    for (const auto& pair : batch.pairs()) total_tokens += pair.target_tokens_size();
    normalizer_ = LossNormalizer(v1::TOKEN_MEAN, total_tokens, batch.pairs_size());
  }

  PhaseId phase() const override { return PhaseId::kSft; }
  int64_t rows() const override { return batch_.pairs_size(); }

  absl::StatusOr<MicroResult> Loss(int64_t begin, int64_t end) override {
    std::vector<model::SequencePair> pairs;
    for (int64_t i = begin; i < end; ++i) {
      pairs.push_back({batch_.pairs(i).prompt_tokens(), batch_.pairs(i).target_tokens()});
    }
    absl::StatusOr<model::TokenBatch> tb = in_.Tokens(pairs);
    if (!tb.ok()) return tb.status();
    MicroResult r;
    torch::Tensor hits;
    r.loss = SftLoss(model::TargetLogProbs(in_.models->policy(), *tb, 1.0, &hits),
                     tb->response_mask, normalizer_);
    r.tokens = tb->response_mask.sum().item<double>();
    // A row is exact when every target token is the argmax.
    r.exact_rows = (hits.logical_or(tb->response_mask == 0)).all(1).sum().item<double>();
    return r;
  }

 private:
  const ObjectiveInput in_;
  const v1::SftBatch& batch_;
  double normalizer_ = 1;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Objective>> NewSftObjective(const ObjectiveInput& in) {
  return std::make_unique<SftObjective>(in, *std::get<const v1::SftBatch*>(in.batch));
}

}  // namespace trellis::learner::internal
