#include "learner/internal/update_engine.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "learner/internal/optimizer.h"
#include "ledger/memory_tracker.h"
#include "model/lora.h"

namespace trellis::learner::internal {
namespace {

using ledger::Object;
using ledger::Stage;

// A step's sums over its micro-batches, and the stats they give.
struct MicroSums {
  double loss = 0, kl = 0, clipped = 0, tokens = 0, exact_rows = 0;
  double value_loss = 0, value_clipped = 0, gap = 0, truncated = 0, divergence = 0;
  double margin = 0, ranked_right = 0, chosen_reward = 0, rejected_reward = 0;
  double aux = 0, differing = 0, compared = 0, record_bytes = 0, gap_replayed = 0, gap_own = 0;
  int32_t micro_batches = 0;

  void Add(const MicroResult& r) {
    loss += r.loss.item<double>();
    kl += r.kl_sum;
    clipped += r.clipped_tokens;
    tokens += r.tokens;
    exact_rows += r.exact_rows;
    value_loss += r.value_loss;
    value_clipped += r.value_clipped;
    gap += r.logprob_gap_sum;
    truncated += r.weights_truncated;
    divergence += r.teacher_divergence_sum;
    margin += r.margin_sum;
    ranked_right += r.ranked_right;
    chosen_reward += r.chosen_reward_sum;
    rejected_reward += r.rejected_reward_sum;
    aux += r.router_aux_loss_sum;
    differing += r.routing_differing;
    compared += r.routing_compared;
    record_bytes += r.routing_record_bytes;
    gap_replayed += r.logprob_gap_replayed_sum;
    gap_own += r.logprob_gap_own_sum;
    ++micro_batches;
  }

  // Every rank's sums added up: the whole batch's.
  absl::Status SumOver(DataParallelGroup& group) {
    double* const fields[] = {
        &loss, &kl,        &clipped, &tokens,       &exact_rows,    &value_loss,     &value_clipped,
        &gap,  &truncated, &margin,  &ranked_right, &chosen_reward, &rejected_reward,
        &aux,  &differing, &compared, &record_bytes, &gap_replayed, &gap_own, &divergence};
    std::vector<double> values;
    for (double* f : fields) values.push_back(*f);
    values.push_back(micro_batches);
    if (absl::Status s = group.AllReduceSum(values); !s.ok()) return s;
    for (size_t i = 0; i < std::size(fields); ++i) *fields[i] = values[i];
    micro_batches = static_cast<int32_t>(values.back());
    return absl::OkStatus();
  }

  // `rows`: the batch's rows (pairs for a preference batch).
  void Fill(int64_t rows, v1::TrainStats* stats) const {
    stats->set_loss(loss);
    stats->set_micro_batches(micro_batches);
    stats->set_kl(tokens > 0 ? kl / tokens : 0);
    stats->set_clip_fraction(tokens > 0 ? clipped / tokens : 0);
    stats->set_trained_tokens(static_cast<int64_t>(tokens));
    stats->set_sequence_accuracy(exact_rows / rows);
    stats->set_value_loss(value_loss);
    stats->set_value_clip_fraction(tokens > 0 ? value_clipped / tokens : 0);
    stats->set_logprob_gap(tokens > 0 ? gap / tokens : 0);
    stats->set_importance_weight_truncated(tokens > 0 ? truncated / tokens : 0);
    stats->set_teacher_divergence(tokens > 0 ? divergence / tokens : 0);
    stats->set_reward_margin(margin / rows);
    stats->set_preference_accuracy(ranked_right / rows);
    stats->set_chosen_reward(chosen_reward / rows);
    stats->set_rejected_reward(rejected_reward / rows);
    stats->set_router_aux_loss(micro_batches > 0 ? aux / micro_batches : 0);
    stats->set_routing_mismatch(compared > 0 ? differing / compared : 0);
    stats->set_routing_record_bytes(static_cast<int64_t>(record_bytes));
    stats->set_logprob_gap_replayed(tokens > 0 ? gap_replayed / tokens : 0);
    stats->set_logprob_gap_own_routing(tokens > 0 ? gap_own / tokens : 0);
  }
};

}  // namespace

void UpdateEngine::UpdatePeak::Observe(int64_t peak, int64_t base, int64_t saved, int64_t after,
                                       int64_t optimizer) {
  if (peak <= bytes) return;
  bytes = peak;
  optimizer_state = optimizer;
  workspace = std::max<int64_t>(0, peak - base - saved - std::max<int64_t>(0, after - base));
}

UpdateEngine::UpdateEngine(const v1::JobConfig& job, std::string worker_id, LearnerModels* models,
                           std::unique_ptr<DataParallelGroup> group, ledger::Ledger* ledger)
    : job_(job),
      worker_id_(std::move(worker_id)),
      models_(models),
      group_(std::move(group)),
      ledger_(ledger) {}

absl::Status UpdateEngine::ShardParameters() {
  const int stage = job_.memory().zero_stage();
  if (stage < 2) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<FlatShards>> flat =
      FlatShards::Make(models_->policy(), group_.get(), stage, worker_id_);
  if (!flat.ok()) return flat.status();
  flat_ = *std::move(flat);
  return absl::OkStatus();
}

void UpdateEngine::EnsureOptimizer(Phase& phase, PhaseId id) {
  if (phase.optimizer != nullptr) return;
  phase.params = TrainableSet(PhaseParams(*models_, id), models_->masters(), group_.get(),
                              job_.memory().zero_stage() == 1, flat_.get());
  auto [decay, no_decay] = phase.params.DecayGroups();
  phase.optimizer = NewOptimizer(std::move(decay), std::move(no_decay), PhaseOptimizer(job_, id));
}

absl::StatusOr<v1::TrainStats> UpdateEngine::Step(Objective& objective) {
  const PhaseId id = objective.phase();
  absl::StatusOr<v1::TrainStats> stats =
      Update(id, objective.rows(),
             [&objective](int64_t begin, int64_t end) { return objective.Loss(begin, end); });
  if (!stats.ok()) return stats;
  if (absl::Status s = objective.Complete(*this, &*stats); !s.ok()) return s;
  return Finish(id, *std::move(stats), objective.buffer_bytes());
}

absl::StatusOr<MicroResult> UpdateEngine::RunMicro(
    const MicroFn& micro, int64_t begin, int64_t end,
    const std::function<void(MicroResult&)>& backward) {
  if (flat_ != nullptr) {
    if (absl::Status s = flat_->BeginMicro(); !s.ok()) return s;
  }
  absl::StatusOr<MicroResult> r = micro(begin, end);
  if (!r.ok()) return AtRows(r.status(), worker_id_, begin, end);
  if (backward) backward(*r);
  if (flat_ != nullptr) {
    if (absl::Status s = flat_->EndMicro(); !s.ok()) return s;
  }
  return r;
}

absl::StatusOr<v1::TrainStats> UpdateEngine::Measure(Objective& objective) {
  const int64_t rows = objective.rows();
  if (rows == 0) return absl::InvalidArgumentError(absl::StrCat(worker_id_, ": empty batch"));
  const int64_t micro_rows = MicroBatchRows(job_);
  MicroSums sums;
  try {
    torch::NoGradGuard no_grad;
    for (int64_t begin = 0; begin < rows; begin += micro_rows) {
      absl::StatusOr<MicroResult> r =
          RunMicro([&objective](int64_t b, int64_t e) { return objective.Loss(b, e); }, begin,
                   std::min(rows, begin + micro_rows));
      if (!r.ok()) return r.status();
      sums.Add(*r);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(worker_id_, ": evaluation at version ", version_, ": ",
                                            e.what_without_backtrace()));
  }
  v1::TrainStats stats;
  sums.Fill(rows, &stats);
  stats.set_policy_version(version_);
  return stats;
}

absl::StatusOr<v1::TrainStats> UpdateEngine::Update(PhaseId id, int64_t rows,
                                                    const MicroFn& micro) {
  Phase& phase = this->phase(id);
  EnsureOptimizer(phase, id);
  const v1::OptimizerConfig& config = PhaseOptimizer(job_, id);
  torch::optim::Optimizer& optimizer = *phase.optimizer;
  if (rows == 0) return absl::InvalidArgumentError(absl::StrCat(worker_id_, ": empty batch"));
  const int64_t micro_rows = MicroBatchRows(job_);
  ledger::MemoryTracker& tracker = ledger::MemoryTracker::Get();
  v1::TrainStats stats;
  MicroSums sums;
  int64_t activation_bytes = 0;
  std::optional<ledger::PeakWindow> window;
  const double recompute_before = models_->RecomputeSeconds();
  const int64_t optimizer_before = PolicyOptimizerBytes();
  try {
    phase.params.ZeroGrad();
    // This rank's rows; the loss normalizer is the whole batch's, so the
    // gradients summed over the ranks are the batch's.
    const auto [first, last] = RankRows(rows, group_->rank(), group_->size());
    // Flat shards make every micro-batch a collective: each rank runs as
    // many as the rank with the most rows, a rank short of rows one more
    // of its first row (or the batch's) with its loss times zero.
    const int64_t span = flat_ != nullptr ? (rows + group_->size() - 1) / group_->size()
                                          : last - first;
    const int64_t micro_batches = (span + micro_rows - 1) / micro_rows;
    for (int64_t m = 0; m < micro_batches; ++m) {
      const int64_t begin = first + m * micro_rows;
      const bool padding = begin >= last;
      const int64_t b = padding ? (first < rows ? first : 0) : begin;
      const int64_t e = padding ? b + 1 : std::min(last, begin + micro_rows);
      const int64_t live_before = tracker.live_bytes();
      int64_t saved = 0;
      window.emplace();
      absl::StatusOr<MicroResult> r =
          RunMicro(micro, b, e, [&](MicroResult& result) {
            // What the forward pass keeps alive for backward.
            saved = tracker.live_bytes() - live_before;
            (padding ? result.loss * 0 : result.loss).backward();
          });
      if (!r.ok()) return r.status();
      activation_bytes = std::max(activation_bytes, saved);
      peak_.Observe(window->peak_bytes(), live_before, saved, tracker.live_bytes(),
                    optimizer_before);
      window.reset();
      if (!padding) sums.Add(*r);
    }
    MoveOptimizerState(phase, id, ledger::MoveDirection::kIn);
    const int64_t live_before_step = tracker.live_bytes();
    window.emplace();
    const double max_norm = config.max_grad_norm() > 0 ? config.max_grad_norm() : 1e30;
    if (models_->masters() != nullptr) {
      int64_t model_gradients = 0;
      for (const torch::Tensor& p : phase.params.model_params()) {
        if (p.grad().defined()) model_gradients += p.grad().nbytes();
      }
      peak_.model_gradients = std::max(peak_.model_gradients, model_gradients);
    }
    absl::StatusOr<double> norm = phase.params.PrepareGradients(max_norm);
    if (!norm.ok()) return norm.status();
    stats.set_grad_norm(*norm);
    // The whole batch's loss, so that every rank takes the same decision.
    if (absl::Status s = sums.SumOver(*group_); !s.ok()) return s;
    if (absl::Status s = SkipNonFinite(sums.loss, *norm, &stats); !s.ok()) return s;
    if (!stats.skipped_nonfinite()) {
      const double warmup = config.warmup_steps();
      const double lr =
          config.lr() * (warmup > 0 ? std::min(1.0, (phase.steps + 1) / warmup) : 1.0);
      SetLearningRate(optimizer, lr);
      optimizer.step();
      if (absl::Status s = phase.params.AfterStep(); !s.ok()) return s;
      ++phase.steps;
    }
    peak_.Observe(window->peak_bytes(), live_before_step, 0, tracker.live_bytes(),
                  PolicyOptimizerBytes());
    window.reset();
    MoveOptimizerState(phase, id, ledger::MoveDirection::kOut);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(worker_id_, ": update at version ", version_, ": ",
                                            e.what_without_backtrace()));
  }
  sums.Fill(rows, &stats);
  stats.set_activation_bytes(activation_bytes);
  stats.set_recompute_seconds(models_->RecomputeSeconds() - recompute_before);
  return stats;
}

absl::Status UpdateEngine::SkipNonFinite(double loss, double grad_norm, v1::TrainStats* stats) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) {
    consecutive_skips_ = 0;
    return absl::OkStatus();
  }
  stats->set_skipped_nonfinite(true);
  const int32_t limit = job_.runtime().max_nonfinite_skips();
  if (++consecutive_skips_ < limit) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      worker_id_, ": ", consecutive_skips_,
      " updates in a row had a non-finite loss or gradient norm (the last at version ", version_,
      ": loss ", loss, ", grad norm ", grad_norm, "); stopping at runtime.max_nonfinite_skips (",
      limit, "). Lower the learning rate or check the rewards and the data"));
}

UpdateEngine::Resident UpdateEngine::PolicyBytes() const {
  // Under LoRA the parameters are the frozen base, the adapters their own
  // object; only the adapters have gradients.
  Resident r;
  r.masters = models_->master_copies().bytes();
  if (flat_ != nullptr) {
    // Its own shards; the gathered units are their own object.
    r.parameters = flat_->shard_bytes();
    r.gradients = flat_->gradient_bytes();
    r.masters += flat_->master_bytes();
  }
  for (const auto& [name, p] : models_->policy()->NamedWeights()) {
    if (flat_ != nullptr && flat_->Holds(p)) continue;
    (model::IsAdapterName(name) ? r.adapters : r.parameters) += p.nbytes();
    // With bf16 the gradients the step used are the masters'.
    for (const torch::Tensor& t : {p, models_->master_copies().Find(p)}) {
      if (t.defined() && t.grad().defined()) r.gradients += t.grad().nbytes();
    }
  }
  return r;
}

v1::TrainStats UpdateEngine::Finish(PhaseId id, v1::TrainStats stats, int64_t buffer_bytes) {
  ++version_;
  const Resident resident = PolicyBytes();
  stats.set_policy_version(version_);
  stats.set_parameter_bytes(resident.parameters);
  stats.set_adapter_bytes(resident.adapters);
  stats.set_gradient_bytes(resident.gradients);
  stats.set_master_weight_bytes(resident.masters);
  stats.set_optimizer_state_bytes(OptimizerStateBytes(*phase(id).optimizer));
  const Traffic traffic = group_->TakeTraffic();
  stats.set_communication_bytes(traffic.bytes);
  stats.set_communication_seconds(traffic.seconds);
  if (ledger_ != nullptr) {
    RecordObjects(id == PhaseId::kSft ? Stage::kSft : Stage::kUpdate, resident,
                  stats.activation_bytes(), buffer_bytes);
  }
  return stats;
}

void UpdateEngine::RecordObjects(Stage stage, const Resident& resident, int64_t activation_bytes,
                                 int64_t buffer_bytes) {
  const std::string& id = worker_id_;
  const int64_t optimizer_bytes = PolicyOptimizerBytes();
  ledger_->RecordObject(id, Object::kParameters, resident.parameters, stage);
  if (resident.adapters > 0) ledger_->RecordObject(id, Object::kAdapters, resident.adapters, stage);
  ledger_->RecordObject(id, Object::kGradients, resident.gradients, stage);
  // As it was at the update's peak, then as the update left it.
  ledger_->RecordObject(id, Object::kOptimizerState,
                        peak_.bytes > 0 ? peak_.optimizer_state : optimizer_bytes, stage);
  if (resident.masters > 0) {
    ledger_->RecordObject(id, Object::kMasterWeights, resident.masters, stage);
  }
  // The group's largest flat bucket.
  if (group_->buffer_bytes() > 0) {
    ledger_->RecordObject(id, Object::kCommunication, group_->buffer_bytes(), stage);
  }
  if (models_->has_critic()) ledger_->RecordObject(id, Object::kCritic, CriticBytes(), stage);
  if (buffer_bytes > 0) ledger_->RecordObject(id, Object::kRolloutBuffer, buffer_bytes, stage);
  // Transients at the update's peak, beside the residents above, then
  // freed: they count only in the span of this update (attribution.h).
  ledger_->RecordObject(id, Object::kActivations, activation_bytes, stage);
  ledger_->RecordObject(id, Object::kWorkspace, peak_.workspace, stage);
  // Stage 3: the units gathered at once at most, then as the update left
  // them (none).
  const int64_t gathered = flat_ != nullptr ? flat_->TakeGatheredPeak() : 0;
  if (gathered > 0) ledger_->RecordObject(id, Object::kGatheredParameters, gathered, stage);
  if (peak_.model_gradients > 0) {
    ledger_->RecordObject(id, Object::kGradients, resident.gradients + peak_.model_gradients,
                          stage);
    ledger_->RecordObject(id, Object::kGradients, resident.gradients, stage);
  }
  ledger_->RecordObject(id, Object::kActivations, 0, stage);
  ledger_->RecordObject(id, Object::kWorkspace, 0, stage);
  if (gathered > 0) {
    ledger_->RecordObject(id, Object::kGatheredParameters, flat_->gathered_bytes(), stage);
  }
  ledger_->RecordObject(id, Object::kOptimizerState, optimizer_bytes, stage);
  peak_ = UpdatePeak{};
}

int64_t UpdateEngine::PolicyOptimizerBytes() {
  int64_t bytes = 0;
  for (PhaseId p : kPolicyPhases) {
    bytes += DeviceStateBytes(phase(p));
  }
  return bytes;
}

int64_t UpdateEngine::CriticBytes() {
  int64_t bytes = 0;
  for (const auto& [name, p] : models_->CriticWeights()) {
    bytes += p.nbytes();
    if (p.grad().defined()) bytes += p.grad().nbytes();
  }
  return bytes + DeviceStateBytes(phase(PhaseId::kCritic));
}

int64_t UpdateEngine::DeviceStateBytes(Phase& phase) {
  if (phase.optimizer == nullptr || phase.offload.out()) return 0;
  return OptimizerStateBytes(*phase.optimizer);
}

void UpdateEngine::MoveOptimizerState(Phase& phase, PhaseId id, ledger::MoveDirection direction) {
  if (!job_.memory().offload_optimizer_state()) return;
  const model::MoveResult moved =
      direction == ledger::MoveDirection::kOut
          ? phase.offload.MoveOut(OptimizerStateTensors(*phase.optimizer))
          : phase.offload.MoveIn();
  if (ledger_ == nullptr || moved.tensors == 0) return;
  ledger_->RecordMove(
      worker_id_, id == PhaseId::kCritic ? Object::kCritic : Object::kOptimizerState, direction,
      moved.bytes, moved.seconds, id == PhaseId::kSft ? Stage::kSft : Stage::kUpdate);
}

}  // namespace trellis::learner::internal
