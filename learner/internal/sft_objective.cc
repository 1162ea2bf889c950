// SFT: cross-entropy on the target tokens (prompt tokens, and targets a
// pair marks untrained, masked), token mean over the whole batch, with
// teacher-forced exact match.

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "learner/internal/objective.h"
#include "learner/internal/routing_replay.h"
#include "learner/objectives.h"
#include "model/token_batch.h"

namespace trellis::learner::internal {
namespace {

class SftObjective : public Objective {
 public:
  SftObjective(const ObjectiveInput& in, const v1::SftBatch& batch) : in_(in), batch_(batch) {
    double total_tokens = 0;
    for (const auto& pair : batch.pairs()) {
      total_tokens += pair.trained().empty()
                          ? pair.target_tokens_size()
                          : std::count(pair.trained().begin(), pair.trained().end(), true);
    }
    normalizer_ = LossNormalizer(v1::TOKEN_MEAN, total_tokens, batch.pairs_size());
  }

  PhaseId phase() const override { return PhaseId::kSft; }
  int64_t rows() const override { return batch_.pairs_size(); }

  absl::StatusOr<MicroResult> Loss(int64_t begin, int64_t end) override {
    std::vector<model::SequencePair> pairs;
    for (int64_t i = begin; i < end; ++i) {
      const v1::SftBatch::Pair& pair = batch_.pairs(i);
      pairs.push_back({pair.prompt_tokens(), pair.target_tokens(), pair.trained()});
    }
    absl::StatusOr<model::TokenBatch> tb = in_.Tokens(pairs);
    if (!tb.ok()) return At(tb.status(), begin);
    MicroResult r;
    torch::Tensor hits;
    model::ExpertRouting routing;
    r.loss = SftLoss(model::TargetLogProbs(in_.models->policy(), *tb, 1.0, &hits, &routing),
                     tb->response_mask, normalizer_);
    AddLoadBalancing(routing, in_.models->policy()->config(),
                     static_cast<double>(end - begin) / static_cast<double>(rows()), &r);
    r.tokens = tb->response_mask.sum().item<double>();
    // A row is exact when every target token is the argmax.
    r.exact_rows = (hits.logical_or(tb->response_mask == 0)).all(1).sum().item<double>();
    return r;
  }

 private:
  // `status` naming the SFT pair of its token batch row (a micro-batch
  // starts at pair `begin`).
  static absl::Status At(const absl::Status& status, int64_t begin) {
    return absl::Status(status.code(),
                        absl::StrCat("sft pairs from ", begin, ": ", status.message()));
  }

  const ObjectiveInput in_;
  const v1::SftBatch& batch_;
  double normalizer_ = 1;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Objective>> NewSftObjective(const ObjectiveInput& in) {
  return std::make_unique<SftObjective>(in, *std::get<const v1::SftBatch*>(in.batch));
}

}  // namespace trellis::learner::internal
