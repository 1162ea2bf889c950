// The local learner's steps (learner/internal/local_learner.h): the
// micro-batched update of every recipe, the memory strategies it runs under
// (job.memory), and what it reports to the ledger.

#include "learner/local_learner.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/recipe.h"
#include "learner/internal/local_learner.h"
#include "learner/internal/optimizer.h"
#include "learner/losses.h"
#include "learner/objectives.h"
#include "ledger/memory_tracker.h"
#include "model/lora.h"
#include "model/policy.h"
#include "weightsync/fingerprint.h"

namespace trellis::learner {
namespace internal {

using ledger::Object;
using ledger::Stage;

void MicroSums::Add(const MicroResult& r) {
  loss += r.loss.item<double>();
  kl += r.kl_sum;
  clipped += r.clipped_tokens;
  tokens += r.tokens;
  exact_rows += r.exact_rows;
  value_loss += r.value_loss;
  value_clipped += r.value_clipped;
  margin += r.margin_sum;
  ranked_right += r.ranked_right;
  chosen_reward += r.chosen_reward_sum;
  rejected_reward += r.rejected_reward_sum;
  ++micro_batches;
}

absl::Status MicroSums::SumOver(DataParallelGroup& group) {
  double* const fields[] = {&loss,         &kl,         &clipped,       &tokens,
                            &exact_rows,   &value_loss, &value_clipped, &margin,
                            &ranked_right, &chosen_reward, &rejected_reward};
  std::vector<double> values;
  for (double* f : fields) values.push_back(*f);
  values.push_back(micro_batches);
  if (absl::Status s = group.AllReduceSum(values); !s.ok()) return s;
  for (size_t i = 0; i < std::size(fields); ++i) *fields[i] = values[i];
  micro_batches = static_cast<int32_t>(values.back());
  return absl::OkStatus();
}

void MicroSums::Fill(int64_t rows, v1::TrainStats* stats) const {
  stats->set_loss(loss);
  stats->set_micro_batches(micro_batches);
  stats->set_kl(tokens > 0 ? kl / tokens : 0);
  stats->set_clip_fraction(tokens > 0 ? clipped / tokens : 0);
  stats->set_trained_tokens(static_cast<int64_t>(tokens));
  stats->set_sequence_accuracy(exact_rows / rows);
  stats->set_value_loss(value_loss);
  stats->set_value_clip_fraction(tokens > 0 ? value_clipped / tokens : 0);
  stats->set_reward_margin(margin / rows);
  stats->set_preference_accuracy(ranked_right / rows);
  stats->set_chosen_reward(chosen_reward / rows);
  stats->set_rejected_reward(rejected_reward / rows);
}

void LocalLearner::UpdatePeak::Observe(int64_t peak, int64_t base, int64_t saved, int64_t after) {
  if (peak <= bytes) return;
  bytes = peak;
  workspace = std::max<int64_t>(0, peak - base - saved - std::max<int64_t>(0, after - base));
}

LocalLearner::LocalLearner(const v1::JobConfig& job, const LocalLearnerOptions& options,
                           weightsync::Publisher* transport, ledger::Ledger* ledger)
    : job_(job),
      reward_model_(config::RecipeOf(job) == config::Recipe::kRewardModel),
      bf16_(job.memory().precision() == "bf16"),
      options_(options),
      transport_(transport),
      ledger_(ledger) {}

absl::Status LocalLearner::Init() {
  // A reward-model job trains a scalar-head model in the policy's place
  // (config refuses LoRA for it).
  absl::StatusOr<model::Transformer> policy = model::NewPolicy(
      job_.model(), job_.memory().lora(), options_.vocab_size, options_.seed,
      reward_model_ ? model::Head::kScalar : model::Head::kLanguageModel);
  if (!policy.ok()) {
    return absl::Status(policy.status().code(),
                        absl::StrCat(options_.worker_id, ": ", policy.status().message()));
  }
  model_ = *std::move(policy);
  if (model_->has_adapters()) base_fingerprint_ = weightsync::Fingerprint(model_->BaseWeights());
  try {
    model_->train();
    if (config::RecipeOf(job_) == config::Recipe::kPpo) {
      if (job_.ppo().critic() == "shared") {
        value_head_ =
            torch::nn::Linear(torch::nn::LinearOptions(job_.model().d_model(), 1).bias(false));
        torch::NoGradGuard no_grad;
        value_head_->weight.normal_(0.0, job_.model().init_std());
      } else {
        critic_ = model::Transformer(job_.model(), options_.vocab_size, model::Head::kScalar);
        critic_->train();
      }
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(options_.worker_id, ": building the model: ", e.what_without_backtrace()));
  }
  GroupOptions group;
  group.member = options_.group;
  group.timeout = absl::Milliseconds(job_.deployment().call_timeout_ms());
  group.bucket_bytes = job_.deployment().bucket_bytes();
  group.worker_id = options_.worker_id;
  absl::StatusOr<std::unique_ptr<DataParallelGroup>> joined = DataParallelGroup::Join(group);
  if (!joined.ok()) return joined.status();
  group_ = *std::move(joined);
  // Memory strategies. With bf16 the fp32 masters are taken from these
  // weights before the models are rounded (a tensor keeps its identity
  // through the cast, so the optimizers find them).
  std::vector<torch::Tensor> trained = model_->parameters();
  if (!critic_.is_empty()) {
    for (const torch::Tensor& p : critic_->parameters()) trained.push_back(p);
  }
  if (value_head_) trained.push_back(value_head_->weight);
  for (const torch::Tensor& p : trained) {
    if (bf16_ && p.requires_grad()) masters_.For(p);
  }
  for (model::Transformer* m : {&model_, &critic_}) {
    if (m->is_empty()) continue;
    (*m)->ApplyMemoryConfig(job_.memory());
  }
  if (bf16_ && value_head_) value_head_->weight.set_data(value_head_->weight.to(torch::kBFloat16));
  return absl::OkStatus();
}

void LocalLearner::EnsureOptimizer(Phase& phase, std::vector<torch::Tensor> params,
                                   const v1::OptimizerConfig& config) {
  if (phase.optimizer != nullptr) return;
  phase.params =
      TrainableSet(std::move(params), masters(), group_.get(), job_.memory().zero_stage() == 1);
  phase.optimizer = NewOptimizer(phase.params.owned_params(), config);
}

absl::StatusOr<v1::TrainStats> LocalLearner::SftStep(const v1::SftBatch& batch) {
  EnsureOptimizer(sft_, TrainedParams(), job_.sft().optimizer());
  absl::StatusOr<v1::TrainStats> stats =
      Update(sft_, job_.sft().optimizer(), batch.pairs_size(), SftMicro(batch));
  if (!stats.ok()) return stats;
  return Finish(sft_, Stage::kSft, *std::move(stats), 0);
}

absl::StatusOr<v1::TrainStats> LocalLearner::TrainStep(const v1::TrainBatch& batch) {
  const auto& grpo = job_.grpo();
  const bool ppo = config::RecipeOf(job_) == config::Recipe::kPpo;
  const bool use_ref = grpo.kl_coef() > 0;
  const bool kl_in_loss = use_ref && (!ppo || job_.ppo().kl_mode() == "loss");
  double total_tokens = 0;
  for (int i = 0; i < batch.samples_size(); ++i) {
    const v1::TrainSample& s = batch.samples(i);
    const int n = s.response_tokens_size();
    if (n == 0 || s.old_logprobs_size() != n || (use_ref && s.ref_logprobs_size() != n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(options_.worker_id, ": train sample ", i, " has ", n, " response tokens, ",
                       s.old_logprobs_size(), " old log-probs and ", s.ref_logprobs_size(),
                       " reference log-probs; expected equal, non-zero",
                       use_ref ? "" : " (reference log-probs may be empty: kl_coef is 0)"));
    }
    total_tokens += n;
  }
  PpoTargets targets;
  if (ppo) {
    absl::StatusOr<PpoTargets> t = ComputePpoTargets(batch);
    if (!t.ok()) return t.status();
    targets = *std::move(t);
  }
  const double normalizer =
      LossNormalizer(grpo.loss_aggregation(), total_tokens, batch.samples_size());
  const double temperature = job_.sampling().temperature();
  // grpo.dapo.clip_eps_{low,high}: 0 takes grpo.clip_eps.
  const double clip_low =
      grpo.dapo().clip_eps_low() > 0 ? grpo.dapo().clip_eps_low() : grpo.clip_eps();
  const double clip_high =
      grpo.dapo().clip_eps_high() > 0 ? grpo.dapo().clip_eps_high() : grpo.clip_eps();
  MicroFn micro = [&](int64_t begin, int64_t end) -> absl::StatusOr<MicroResult> {
    std::vector<model::SequencePair> pairs;
    std::vector<absl::Span<const float>> old_rows, ref_rows;
    std::vector<float> advantages;
    for (int64_t i = begin; i < end; ++i) {
      const v1::TrainSample& s = batch.samples(i);
      pairs.push_back({s.prompt_tokens(), s.response_tokens()});
      old_rows.emplace_back(s.old_logprobs());
      ref_rows.emplace_back(s.ref_logprobs());
      advantages.push_back(s.advantage());
    }
    absl::StatusOr<model::TokenBatch> tb =
        model::MakeTokenBatch(pairs, options_.pad_id, job_.model().max_seq_len());
    if (!tb.ok()) return tb.status();
    torch::Tensor logp, values;
    if (value_head_) {
      const torch::Tensor hidden = model_->Hidden(tb->inputs);
      logp = model::TargetLogProbsFromLogits(model_->ApplyHead(hidden), *tb, temperature);
      values = HeadValues(hidden, *tb);
    } else {
      logp = model::TargetLogProbs(model_, *tb, temperature);
    }
    torch::Tensor old_logp = model::PlaceResponseValues(old_rows, *tb);
    torch::Tensor ref_logp =
        kl_in_loss ? model::PlaceResponseValues(ref_rows, *tb) : torch::Tensor();
    torch::Tensor adv = ppo ? model::PlaceResponseValues(Rows(targets.advantages, begin, end), *tb)
                            : torch::tensor(advantages, torch::kFloat32);
    PolicyLoss loss =
        ClippedPolicyLoss(logp, old_logp, ref_logp, adv, tb->response_mask, clip_low, clip_high,
                          kl_in_loss ? grpo.kl_coef() : 0, grpo.loss_aggregation(), normalizer);
    MicroResult r{loss.loss, loss.kl_sum, loss.clipped_tokens, loss.tokens};
    if (value_head_) {
      MicroResult v = ValueLoss(values, *tb, targets, begin, end, total_tokens);
      r.loss = r.loss + job_.ppo().vf_coef() * v.loss;
      r.value_loss = v.value_loss;
      r.value_clipped = v.value_clipped;
    }
    return r;
  };
  std::vector<torch::Tensor> params = TrainedParams();
  if (value_head_) params.push_back(value_head_->weight);
  EnsureOptimizer(rl_, std::move(params), grpo.optimizer());
  absl::StatusOr<v1::TrainStats> stats = Update(rl_, grpo.optimizer(), batch.samples_size(), micro);
  if (!stats.ok()) return stats;
  if (critic_) {
    MicroFn critic_micro = [&](int64_t begin, int64_t end) -> absl::StatusOr<MicroResult> {
      absl::StatusOr<model::TokenBatch> tb = SampleBatch(batch, begin, end);
      if (!tb.ok()) return tb.status();
      return ValueLoss(model::ResponseValues(critic_, *tb), *tb, targets, begin, end, total_tokens);
    };
    EnsureOptimizer(critic_phase_, critic_->parameters(), job_.ppo().critic_optimizer());
    absl::StatusOr<v1::TrainStats> critic =
        Update(critic_phase_, job_.ppo().critic_optimizer(), batch.samples_size(), critic_micro);
    if (!critic.ok()) return critic.status();
    stats->set_value_loss(critic->value_loss());
    stats->set_value_clip_fraction(critic->value_clip_fraction());
    stats->set_activation_bytes(std::max(stats->activation_bytes(), critic->activation_bytes()));
  }
  if (ppo && job_.ppo().kl_mode() == "reward") {
    stats->set_kl(total_tokens > 0 ? targets.kl_sum / total_tokens : 0);
  }
  int64_t buffer_bytes = 0;
  if (ppo) {
    buffer_bytes = static_cast<int64_t>(batch.ByteSizeLong()) +
                   3 * static_cast<int64_t>(sizeof(float) * total_tokens);
  }
  return Finish(rl_, Stage::kUpdate, *std::move(stats), buffer_bytes);
}

absl::StatusOr<v1::WeightSyncStats> LocalLearner::PublishWeights() {
  if (transport_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        options_.worker_id, ": no weight transport (rank ", group_->rank(), " of ",
        group_->size(), " learners; rank 0 publishes)"));
  }
  // Under LoRA only the adapters change, and actors build the same base:
  // they get the adapters and the base's fingerprint, to refuse adapters
  // trained on another base.
  model::NamedTensors sent = TrainedWeights();
  if (bf16_) {
    // Actors sample in float32: they get the bf16 weights the learner
    // computes with, widened.
    for (auto& [name, tensor] : sent) tensor = tensor.detach().to(torch::kFloat32);
  }
  if (model_->has_adapters()) {
    sent.emplace_back(weightsync::kBaseFingerprint, weightsync::FingerprintTensor(base_fingerprint_));
  }
  return transport_->Publish(version_, sent);
}

absl::Status LocalLearner::SaveWeights(const std::string& path) {
  // Plain Llama weights (adapters merged) that load without LoRA.
  return SaveNamed(path, model_->MergedWeights());
}

model::NamedTensors LocalLearner::TrainedWeights() const {
  return model_->has_adapters() ? model_->AdapterWeights() : model_->NamedWeights();
}

std::vector<torch::Tensor> LocalLearner::TrainedParams() const {
  std::vector<torch::Tensor> params;
  for (const auto& [name, tensor] : TrainedWeights()) params.push_back(tensor);
  return params;
}

absl::StatusOr<v1::TrainStats> LocalLearner::PreferenceStep(const v1::PreferenceBatch& batch) {
  absl::StatusOr<MicroFn> micro = PreferenceMicro(batch);
  if (!micro.ok()) return micro.status();
  const v1::OptimizerConfig& config =
      reward_model_ ? job_.reward_model().optimizer() : job_.dpo().optimizer();
  EnsureOptimizer(pref_, TrainedParams(), config);
  absl::StatusOr<v1::TrainStats> stats = Update(pref_, config, batch.pairs_size(), *micro);
  if (!stats.ok()) return stats;
  return Finish(pref_, Stage::kUpdate, *std::move(stats), 0);
}

absl::StatusOr<v1::TrainStats> LocalLearner::EvalSft(const v1::SftBatch& batch) {
  return Measure(batch.pairs_size(), SftMicro(batch));
}

absl::StatusOr<v1::TrainStats> LocalLearner::EvalPreference(const v1::PreferenceBatch& batch) {
  absl::StatusOr<MicroFn> micro = PreferenceMicro(batch);
  if (!micro.ok()) return micro.status();
  return Measure(batch.pairs_size(), *micro);
}

// Cross-entropy on the target tokens, token mean over the whole batch.
MicroFn LocalLearner::SftMicro(const v1::SftBatch& batch) {
  double total_tokens = 0;
  for (const auto& pair : batch.pairs()) total_tokens += pair.target_tokens_size();
  const double normalizer = LossNormalizer(v1::TOKEN_MEAN, total_tokens, batch.pairs_size());
  return [this, &batch, normalizer](int64_t begin, int64_t end) -> absl::StatusOr<MicroResult> {
    std::vector<model::SequencePair> pairs;
    for (int64_t i = begin; i < end; ++i) {
      pairs.push_back({batch.pairs(i).prompt_tokens(), batch.pairs(i).target_tokens()});
    }
    absl::StatusOr<model::TokenBatch> tb =
        model::MakeTokenBatch(pairs, options_.pad_id, job_.model().max_seq_len());
    if (!tb.ok()) return tb.status();
    MicroResult r;
    torch::Tensor hits;
    r.loss = SftLoss(model::TargetLogProbs(model_, *tb, 1.0, &hits), tb->response_mask, normalizer);
    r.tokens = tb->response_mask.sum().item<double>();
    // A row is exact when every target token is the argmax.
    r.exact_rows = (hits.logical_or(tb->response_mask == 0)).all(1).sum().item<double>();
    return r;
  };
}

// The preference loss (job.dpo) over pairs [begin, end): their chosen and
// rejected responses are the rows of one forward pass, each row's
// log-probs summed (at sampling.temperature, as the reference scores).
absl::StatusOr<MicroFn> LocalLearner::PreferenceMicro(const v1::PreferenceBatch& batch) {
  // A reward model's Bradley-Terry loss is DPO's sigmoid loss with the
  // model's sequence scores in place of the log-prob sums, no reference
  // and beta 1.
  absl::StatusOr<PreferenceLossKind> kind =
      reward_model_ ? absl::StatusOr<PreferenceLossKind>(PreferenceLossKind::kDpo)
                    : PreferenceLossKindFromName(job_.dpo().loss());
  if (!kind.ok()) return kind.status();
  for (int i = 0; i < batch.pairs_size(); ++i) {
    const v1::PreferencePair& p = batch.pairs(i);
    if (p.chosen_tokens().empty() || p.rejected_tokens().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(options_.worker_id, ": preference pair ", i, " has ", p.chosen_tokens_size(),
                       " chosen and ", p.rejected_tokens_size(),
                       " rejected response tokens; expected both non-empty"));
    }
  }
  const double normalizer = std::max(1, batch.pairs_size());
  const double beta = reward_model_ ? 1.0 : job_.dpo().beta();
  const double temperature = job_.sampling().temperature();
  return MicroFn([this, &batch, kind = *kind, normalizer, beta, temperature](
                     int64_t begin, int64_t end) -> absl::StatusOr<MicroResult> {
    const int64_t n = end - begin;
    std::vector<model::SequencePair> rows;
    std::vector<double> ref_chosen, ref_rejected;
    for (int64_t i = begin; i < end; ++i) {
      const v1::PreferencePair& p = batch.pairs(i);
      rows.push_back({p.prompt_tokens(), p.chosen_tokens()});
      ref_chosen.push_back(reward_model_ ? 0.0 : p.ref_chosen_logprob());
      ref_rejected.push_back(reward_model_ ? 0.0 : p.ref_rejected_logprob());
    }
    for (int64_t i = begin; i < end; ++i) {
      rows.push_back({batch.pairs(i).prompt_tokens(), batch.pairs(i).rejected_tokens()});
    }
    absl::StatusOr<model::TokenBatch> tb =
        model::MakeTokenBatch(rows, options_.pad_id, job_.model().max_seq_len());
    if (!tb.ok()) return tb.status();
    const torch::Tensor sums = reward_model_
                                   ? model::SequenceScores(model_, *tb)
                                   : model::TargetLogProbs(model_, *tb, temperature).sum(1);
    PreferenceLoss loss = ComputePreferenceLoss(
        sums.slice(0, 0, n), sums.slice(0, n, 2 * n), torch::tensor(ref_chosen),
        torch::tensor(ref_rejected), beta, kind, normalizer);
    MicroResult r;
    r.loss = loss.loss;
    r.tokens = tb->response_mask.sum().item<double>();
    r.margin_sum = loss.margin_sum;
    r.ranked_right = loss.ranked_right;
    r.chosen_reward_sum = loss.chosen_reward_sum;
    r.rejected_reward_sum = loss.rejected_reward_sum;
    return r;
  });
}

// micro(begin, end), its failure named with this worker and the rows.
absl::StatusOr<MicroResult> LocalLearner::RunMicro(const MicroFn& micro, int64_t begin,
                                                   int64_t end) {
  absl::StatusOr<MicroResult> r = micro(begin, end);
  if (!r.ok()) {
    return absl::Status(r.status().code(), absl::StrCat(options_.worker_id, ": rows [", begin, ", ",
                                                        end, "): ", r.status().message()));
  }
  return r;
}

// The micro-batches' forward passes without gradients: the batch's loss
// and stats under the current weights.
absl::StatusOr<v1::TrainStats> LocalLearner::Measure(int64_t rows, const MicroFn& micro) {
  if (rows == 0) {
    return absl::InvalidArgumentError(absl::StrCat(options_.worker_id, ": empty batch"));
  }
  const int64_t micro_rows = std::max(1, job_.grpo().micro_batch_size());
  MicroSums sums;
  try {
    torch::NoGradGuard no_grad;
    for (int64_t begin = 0; begin < rows; begin += micro_rows) {
      absl::StatusOr<MicroResult> r = RunMicro(micro, begin, std::min(rows, begin + micro_rows));
      if (!r.ok()) return r.status();
      sums.Add(*r);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(options_.worker_id, ": evaluation at version ",
                                            version_, ": ", e.what_without_backtrace()));
  }
  v1::TrainStats stats;
  sums.Fill(rows, &stats);
  stats.set_policy_version(version_);
  return stats;
}

absl::StatusOr<v1::TrainStats> LocalLearner::Update(Phase& phase, const v1::OptimizerConfig& config,
                                                    int64_t rows, const MicroFn& micro) {
  torch::optim::Optimizer& optimizer = *phase.optimizer;
  if (rows == 0) {
    return absl::InvalidArgumentError(absl::StrCat(options_.worker_id, ": empty batch"));
  }
  const int64_t micro_rows = std::max(1, job_.grpo().micro_batch_size());
  ledger::MemoryTracker& tracker = ledger::MemoryTracker::Get();
  v1::TrainStats stats;
  MicroSums sums;
  int64_t activation_bytes = 0;
  UpdatePeak& peak = peak_;
  std::optional<ledger::PeakWindow> window;
  const double recompute_before = RecomputeSeconds();
  try {
    phase.params.ZeroGrad();
    // This rank's rows; the loss normalizer is the whole batch's, so the
    // gradients summed over the ranks are the batch's.
    const auto [first, last] = RankRows(rows, group_->rank(), group_->size());
    for (int64_t begin = first; begin < last; begin += micro_rows) {
      const int64_t live_before = tracker.live_bytes();
      window.emplace();
      absl::StatusOr<MicroResult> r = RunMicro(micro, begin, std::min(last, begin + micro_rows));
      if (!r.ok()) return r.status();
      // What the forward pass keeps alive for backward.
      const int64_t saved = tracker.live_bytes() - live_before;
      activation_bytes = std::max(activation_bytes, saved);
      r->loss.backward();
      peak.Observe(window->peak_bytes(), live_before, saved, tracker.live_bytes());
      window.reset();
      sums.Add(*r);
    }
    const int64_t live_before_step = tracker.live_bytes();
    window.emplace();
    const double max_norm = config.max_grad_norm() > 0 ? config.max_grad_norm() : 1e30;
    if (bf16_) {
      int64_t model_gradients = 0;
      for (const torch::Tensor& p : phase.params.model_params()) {
        if (p.grad().defined()) model_gradients += p.grad().nbytes();
      }
      peak.model_gradients = std::max(peak.model_gradients, model_gradients);
    }
    absl::StatusOr<double> norm = phase.params.PrepareGradients(max_norm);
    if (!norm.ok()) return norm.status();
    stats.set_grad_norm(*norm);
    const double warmup = config.warmup_steps();
    const double lr = config.lr() * (warmup > 0 ? std::min(1.0, (phase.steps + 1) / warmup) : 1.0);
    SetLearningRate(optimizer, lr);
    optimizer.step();
    if (absl::Status s = phase.params.AfterStep(); !s.ok()) return s;
    peak.Observe(window->peak_bytes(), live_before_step, 0, tracker.live_bytes());
    window.reset();
    ++phase.steps;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(options_.worker_id, ": update at version ", version_,
                                            ": ", e.what_without_backtrace()));
  }
  if (absl::Status s = sums.SumOver(*group_); !s.ok()) return s;
  sums.Fill(rows, &stats);
  stats.set_activation_bytes(activation_bytes);
  stats.set_recompute_seconds(RecomputeSeconds() - recompute_before);
  return stats;
}

double LocalLearner::RecomputeSeconds() const {
  return model_->recompute_seconds() + (critic_.is_empty() ? 0 : critic_->recompute_seconds());
}

v1::TrainStats LocalLearner::Finish(Phase& phase, Stage stage, v1::TrainStats stats,
                                    int64_t buffer_bytes) {
  ++version_;
  // Under LoRA the parameters are the frozen base, the adapters their own
  // object; only the adapters have gradients.
  int64_t param_bytes = 0, adapter_bytes = 0, grad_bytes = 0;
  for (const auto& [name, p] : model_->NamedWeights()) {
    (model::IsAdapterName(name) ? adapter_bytes : param_bytes) += p.nbytes();
    // With bf16 the gradients the step used are the masters'.
    for (const torch::Tensor& t : {p, masters_.Find(p)}) {
      if (t.defined() && t.grad().defined()) grad_bytes += t.grad().nbytes();
    }
  }
  stats.set_policy_version(version_);
  stats.set_parameter_bytes(param_bytes);
  stats.set_adapter_bytes(adapter_bytes);
  stats.set_gradient_bytes(grad_bytes);
  stats.set_master_weight_bytes(masters_.bytes());
  stats.set_optimizer_state_bytes(OptimizerStateBytes(*phase.optimizer));
  const Traffic traffic = group_->TakeTraffic();
  stats.set_communication_bytes(traffic.bytes);
  stats.set_communication_seconds(traffic.seconds);
  if (ledger_ != nullptr) {
    const std::string& id = options_.worker_id;
    // Every policy phase's optimizer stays resident (checkpoints hold them
    // all), so the object is their sum.
    int64_t optimizer_bytes = 0;
    for (Phase* p : {&sft_, &rl_, &pref_}) {
      if (p->optimizer) optimizer_bytes += OptimizerStateBytes(*p->optimizer);
    }
    ledger_->RecordObject(id, Object::kParameters, param_bytes, stage);
    if (adapter_bytes > 0) ledger_->RecordObject(id, Object::kAdapters, adapter_bytes, stage);
    ledger_->RecordObject(id, Object::kGradients, grad_bytes, stage);
    ledger_->RecordObject(id, Object::kOptimizerState, optimizer_bytes, stage);
    if (bf16_) ledger_->RecordObject(id, Object::kMasterWeights, masters_.bytes(), stage);
    // The group's largest flat bucket.
    if (group_->buffer_bytes() > 0) {
      ledger_->RecordObject(id, Object::kCommunication, group_->buffer_bytes(), stage);
    }
    // Transients at the update's peak, then freed: they count only in the
    // span of this update (attribution.h).
    ledger_->RecordObject(id, Object::kActivations, stats.activation_bytes(), stage);
    ledger_->RecordObject(id, Object::kWorkspace, peak_.workspace, stage);
    if (peak_.model_gradients > 0) {
      ledger_->RecordObject(id, Object::kGradients, grad_bytes + peak_.model_gradients, stage);
      ledger_->RecordObject(id, Object::kGradients, grad_bytes, stage);
    }
    ledger_->RecordObject(id, Object::kActivations, 0, stage);
    ledger_->RecordObject(id, Object::kWorkspace, 0, stage);
    peak_ = UpdatePeak{};
    if (HasCritic()) ledger_->RecordObject(id, Object::kCritic, CriticBytes(), stage);
    if (buffer_bytes > 0) {
      ledger_->RecordObject(id, Object::kRolloutBuffer, buffer_bytes, stage);
    }
  }
  return stats;
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<LearnerWorker>> NewLocalLearner(const v1::JobConfig& job,
                                                               const LocalLearnerOptions& options,
                                                               weightsync::Publisher* transport,
                                                               ledger::Ledger* ledger) {
  auto learner = std::make_unique<internal::LocalLearner>(job, options, transport, ledger);
  if (absl::Status s = learner->Init(); !s.ok()) return s;
  return std::unique_ptr<LearnerWorker>(std::move(learner));
}

}  // namespace trellis::learner
