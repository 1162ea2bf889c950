// SFT: cross-entropy on the target tokens (prompt tokens, and targets a
// pair marks untrained, masked), token mean over the whole batch, with
// teacher-forced exact match.

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "learner/internal/objective.h"
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
      pairs.push_back({batch_.pairs(i).prompt_tokens(), batch_.pairs(i).target_tokens()});
    }
    absl::StatusOr<model::TokenBatch> tb = in_.Tokens(pairs);
    if (!tb.ok()) return tb.status();
    if (absl::Status s = MaskUntrained(begin, end, *tb); !s.ok()) return s;
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
  // Takes the target tokens a pair marks untrained out of the response mask.
  absl::Status MaskUntrained(int64_t begin, int64_t end, model::TokenBatch& tb) const {
    auto mask = tb.response_mask.accessor<float, 2>();
    for (int64_t i = begin; i < end; ++i) {
      const v1::SftBatch::Pair& pair = batch_.pairs(i);
      if (pair.trained().empty()) continue;
      if (pair.trained_size() != pair.target_tokens_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sft pairs[", i, "]: ", pair.trained_size(), " trained flags for ",
            pair.target_tokens_size(), " target tokens"));
      }
      const int64_t row = i - begin;
      for (int j = 0; j < pair.trained_size(); ++j) {
        if (!pair.trained(j)) mask[row][tb.response_start[row] + j] = 0;
      }
    }
    return absl::OkStatus();
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
