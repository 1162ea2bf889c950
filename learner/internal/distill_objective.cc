// On-policy distillation (algorithm distill) on a TrainBatch whose samples
// carry the teacher's log-probs: each token's advantage is
//   A_t = -divergence_weight * (c_t - b) + reward_weight * A_sample
// with c_t the token's cost (TeacherCost, objectives.h: the divergence
// estimate d_t of TeacherDivergence for reverse KL, its gradient's cost for
// JSD), b the batch's mean c_t over its trained tokens and
// A_sample the sample's advantage from the verifier's rewards; the
// policy's clipped surrogate then trains on it, the score-function
// gradient of the per-token divergence. The baseline b leaves that
// gradient's expectation as it is (the student's score has mean 0 under
// its own samples) and takes out the part of every token's advantage that
// is common to the batch. No KL to a reference.

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "learner/internal/policy_gradient_objective.h"
#include "learner/internal/routing_replay.h"
#include "learner/objectives.h"

namespace trellis::learner::internal {
namespace {

class DistillObjective : public PolicyGradientObjective {
 public:
  explicit DistillObjective(const ObjectiveInput& in)
      : PolicyGradientObjective(in, /*kl_in_loss=*/false, /*reads_reference=*/false) {}

  // PolicyGradientObjective::Check, and InvalidArgument naming the first
  // sample whose teacher log-probs do not match its response; then the
  // baseline.
  absl::Status CheckTeacher() {
    if (absl::Status s = Check(); !s.ok()) return s;
    double cost_sum = 0;
    for (int i = 0; i < batch_.samples_size(); ++i) {
      const v1::TrainSample& s = batch_.samples(i);
      if (s.teacher_logprobs_size() != s.response_tokens_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            in_.worker_id, ": train sample ", i, " has ", s.response_tokens_size(),
            " response tokens and ", s.teacher_logprobs_size(),
            " teacher log-probs; expected equal (algorithm distill)"));
      }
      const torch::Tensor c = Cost(s.old_logprobs(), s.teacher_logprobs());
      const torch::Tensor trained =
          s.trained().empty()
              ? torch::ones_like(c)
              : torch::tensor(std::vector<float>(s.trained().begin(), s.trained().end()));
      cost_sum += (c * trained).sum().item<double>();
    }
    baseline_ = total_tokens_ > 0 ? cost_sum / total_tokens_ : 0;
    return absl::OkStatus();
  }

  absl::StatusOr<MicroResult> Loss(int64_t begin, int64_t end) override {
    absl::StatusOr<model::TokenBatch> tb = Tokens(begin, end);
    if (!tb.ok()) return tb.status();
    const v1::DistillConfig& distill = in_.job->distill();
    std::vector<absl::Span<const float>> old_rows, teacher_rows;
    std::vector<float> sample_advantages;
    for (int64_t i = begin; i < end; ++i) {
      old_rows.emplace_back(sample(i).old_logprobs());
      teacher_rows.emplace_back(sample(i).teacher_logprobs());
      sample_advantages.push_back(sample(i).advantage());
    }
    const torch::Tensor student = model::PlaceResponseValues(old_rows, *tb);
    const torch::Tensor teacher = model::PlaceResponseValues(teacher_rows, *tb);
    const torch::Tensor divergence =
        TeacherDivergence(student, teacher, distill.divergence(), distill.jsd_beta()) *
        tb->response_mask;
    const torch::Tensor cost =
        TeacherCost(student, teacher, distill.divergence(), distill.jsd_beta());
    const torch::Tensor advantages =
        -distill.divergence_weight() * (cost - baseline_) * tb->response_mask +
        distill.reward_weight() * torch::tensor(sample_advantages, torch::kFloat32).unsqueeze(1);
    MicroResult routed;
    absl::StatusOr<torch::Tensor> logp = PolicyLogProbs(*tb, begin, end, &routed);
    if (!logp.ok()) return logp.status();
    MicroResult r = PolicyTerm(*tb, *logp, advantages, begin, end);
    AddRouting(routed, &r);
    r.teacher_divergence_sum = divergence.sum().item<double>();
    return r;
  }

 private:
  // The per-token costs (TeacherCost) of one sample's log-probs.
  torch::Tensor Cost(const google::protobuf::RepeatedField<float>& student,
                     const google::protobuf::RepeatedField<float>& teacher) const {
    const v1::DistillConfig& distill = in_.job->distill();
    return TeacherCost(torch::tensor(std::vector<float>(student.begin(), student.end())),
                       torch::tensor(std::vector<float>(teacher.begin(), teacher.end())),
                       distill.divergence(), distill.jsd_beta());
  }

  // The batch's mean cost over its trained tokens.
  double baseline_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Objective>> NewDistillObjective(const ObjectiveInput& in) {
  auto objective = std::make_unique<DistillObjective>(in);
  if (absl::Status s = objective->CheckTeacher(); !s.ok()) return s;
  return objective;
}

}  // namespace trellis::learner::internal
