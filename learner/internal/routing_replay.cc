#include "learner/internal/routing_replay.h"

#include "absl/strings/str_cat.h"
#include "learner/internal/learner_models.h"
#include "model/routing_record.h"

namespace trellis::learner::internal {
namespace {

// Sum over the trained tokens of |behaviour - logp|.
double GapSum(const model::TokenBatch& tb, const torch::Tensor& behaviour,
              const torch::Tensor& logp) {
  return ((logp.detach() - behaviour).abs() * tb.response_mask).sum().item<double>();
}

}  // namespace

absl::StatusOr<torch::Tensor> RoutedLogProbs(const ObjectiveInput& in, const model::TokenBatch& tb,
                                             const std::vector<const v1::TrainSample*>& samples,
                                             const std::vector<int64_t>& sample_ids,
                                             double temperature, double share,
                                             MicroResult* out) {
  model::Transformer& policy = in.models->policy();
  const v1::ModelConfig& config = policy->config();
  if (config.num_experts() == 0) return model::TargetLogProbs(policy, tb, temperature);
  model::ExpertRouting routing;
  const bool replay = in.job->grpo().routing_replay();
  const model::RoutingShape shape = model::RoutingShapeOf(config);
  if (replay) {
    const std::vector<int64_t> live = model::LiveLengths(tb);
    std::vector<const v1::ExpertRouting*> records;
    for (size_t i = 0; i < samples.size(); ++i) {
      if (absl::Status s = model::CheckRouting(samples[i]->routing(), shape, live[i],
                                               absl::StrCat(in.worker_id, ": train sample ", sample_ids[i]));
          !s.ok()) {
        return s;
      }
      records.push_back(&samples[i]->routing());
      out->routing_record_bytes += static_cast<double>(samples[i]->routing().experts().size());
    }
    routing.replay = model::PlaceRouting(records, tb, shape);
  }
  torch::Tensor logp = model::TargetLogProbs(policy, tb, temperature, nullptr, &routing);
  AddLoadBalancing(routing, config, share, out);
  if (replay) {
    const model::RoutingAgreement agreement =
        model::CompareRouting(routing.chosen, routing.replay, tb);
    out->routing_differing += static_cast<double>(agreement.differing);
    out->routing_compared += static_cast<double>(agreement.compared);
    std::vector<absl::Span<const float>> rows;
    for (const v1::TrainSample* s : samples) rows.emplace_back(s->old_logprobs());
    const torch::Tensor behaviour = model::PlaceResponseValues(rows, tb);
    out->logprob_gap_replayed_sum += GapSum(tb, behaviour, logp);
    torch::NoGradGuard no_grad;
    out->logprob_gap_own_sum +=
        GapSum(tb, behaviour, model::TargetLogProbs(policy, tb, temperature));
  }
  return logp;
}

void AddLoadBalancing(const model::ExpertRouting& routing, const v1::ModelConfig& config,
                      double share, MicroResult* out) {
  if (!routing.aux_loss.defined()) return;
  out->router_aux_loss_sum += routing.aux_loss.item<double>();
  if (config.router_aux_loss_coef() <= 0) return;
  const torch::Tensor term =
      (config.router_aux_loss_coef() * share) * routing.aux_loss.to(torch::kCPU);
  out->loss = out->loss.defined() ? out->loss + term : term;
}

void AddRouting(const MicroResult& routed, MicroResult* out) {
  if (routed.loss.defined()) out->loss = out->loss + routed.loss;
  out->router_aux_loss_sum += routed.router_aux_loss_sum;
  out->routing_differing += routed.routing_differing;
  out->routing_compared += routed.routing_compared;
  out->routing_record_bytes += routed.routing_record_bytes;
  out->logprob_gap_replayed_sum += routed.logprob_gap_replayed_sum;
  out->logprob_gap_own_sum += routed.logprob_gap_own_sum;
}

}  // namespace trellis::learner::internal
