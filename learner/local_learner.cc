#include "learner/local_learner.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "learner/internal/optimizer.h"
#include "learner/losses.h"
#include "learner/objectives.h"
#include "ledger/memory_tracker.h"
#include "model/safetensors.h"
#include "model/token_batch.h"
#include "model/transformer.h"

namespace trellis::learner {
namespace {

using ledger::Object;
using ledger::Stage;

// What one micro-batch contributes to a step.
struct MicroResult {
  torch::Tensor loss;
  double kl_sum = 0;
  double clipped_tokens = 0;
  double tokens = 0;
  // Rows whose every target token is the model's argmax (SFT only).
  double exact_rows = 0;
  // PPO: the value loss in `loss` (a shared critic's share, or a separate
  // critic's whole loss) and the tokens whose value was clipped.
  double value_loss = 0;
  double value_clipped = 0;
  // Preference pairs only: PreferenceLoss's sums.
  double margin_sum = 0;
  double ranked_right = 0;
  double chosen_reward_sum = 0;
  double rejected_reward_sum = 0;
};
using MicroFn = std::function<absl::StatusOr<MicroResult>(int64_t begin, int64_t end)>;

// A step's sums over its micro-batches, and the stats they give.
struct MicroSums {
  double loss = 0, kl = 0, clipped = 0, tokens = 0, exact_rows = 0;
  double value_loss = 0, value_clipped = 0;
  double margin = 0, ranked_right = 0, chosen_reward = 0, rejected_reward = 0;
  int32_t micro_batches = 0;

  void Add(const MicroResult& r) {
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
    stats->set_reward_margin(margin / rows);
    stats->set_preference_accuracy(ranked_right / rows);
    stats->set_chosen_reward(chosen_reward / rows);
    stats->set_rejected_reward(rejected_reward / rows);
  }
};

// Format of optimizer.safetensors; a checkpoint with another is refused.
constexpr char kOptimizerFormat[] = "trellis.adamw.v1";

// An integer field of a safetensors file's metadata.
absl::StatusOr<int64_t> MetaInt(const std::map<std::string, std::string>& meta,
                                const std::string& key, const std::string& path) {
  auto it = meta.find(key);
  int64_t value = 0;
  if (it == meta.end() || !absl::SimpleAtoi(it->second, &value)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": metadata field ", key, ": expected an integer, found ",
        it == meta.end() ? "nothing" : "\"" + it->second + "\""));
  }
  return value;
}

// One training phase's optimizer, the parameters it updates, and how many
// steps it has taken.
struct Phase {
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<torch::Tensor> params;
  int64_t steps = 0;
};

void EnsureOptimizer(Phase& phase, std::vector<torch::Tensor> params,
                     const v1::OptimizerConfig& config) {
  if (phase.optimizer != nullptr) return;
  phase.params = std::move(params);
  phase.optimizer = internal::NewOptimizer(phase.params, config);
}

// PPO's per-token targets for every sample of a batch (the rollout buffer
// the update trains on), computed before the update.
struct PpoTargets {
  std::vector<std::vector<float>> advantages;
  std::vector<std::vector<float>> returns;
  std::vector<std::vector<float>> values;
  // Sum over response tokens of log pi_old - log pi_ref (kl_mode reward).
  double kl_sum = 0;
};

class LocalLearner : public LearnerWorker {
 public:
  LocalLearner(const v1::JobConfig& job, const LocalLearnerOptions& options,
               weightsync::Transport* transport, ledger::Ledger* ledger)
      : job_(job), options_(options), transport_(transport), ledger_(ledger) {}

  absl::Status Init() {
    try {
      torch::manual_seed(options_.seed);
      // A reward-model job trains a scalar-head model in the policy's place.
      model_ = model::Transformer(job_.model(), options_.vocab_size,
                                  reward_model_ ? model::Head::kScalar
                                                : model::Head::kLanguageModel);
      model_->train();
      if (job_.algorithm() == "ppo") {
        if (job_.ppo().critic() == "shared") {
          value_head_ = torch::nn::Linear(
              torch::nn::LinearOptions(job_.model().d_model(), 1).bias(false));
          torch::NoGradGuard no_grad;
          value_head_->weight.normal_(0.0, job_.model().init_std());
        } else {
          critic_ = model::Transformer(job_.model(), options_.vocab_size, model::Head::kScalar);
          critic_->train();
        }
      }
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat(options_.worker_id,
                                              ": building the model: ", e.what_without_backtrace()));
    }
    const std::string& init = job_.model().init_checkpoint();
    if (!init.empty()) {
      absl::StatusOr<model::NamedTensors> weights = model::LoadSafetensors(init);
      if (!weights.ok()) return weights.status();
      if (absl::Status s = model_->LoadWeights(*weights); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("model.init_checkpoint ", init,
                                                   ": ", s.message()));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::TrainStats> SftStep(const v1::SftBatch& batch) override {
    EnsureOptimizer(sft_, model_->parameters(), job_.sft().optimizer());
    absl::StatusOr<v1::TrainStats> stats =
        Update(sft_, job_.sft().optimizer(), batch.pairs_size(), SftMicro(batch));
    if (!stats.ok()) return stats;
    return Finish(sft_, Stage::kSft, *std::move(stats), 0);
  }

  absl::StatusOr<v1::TrainStats> TrainStep(const v1::TrainBatch& batch) override {
    const auto& grpo = job_.grpo();
    const bool ppo = job_.algorithm() == "ppo";
    const bool use_ref = grpo.kl_coef() > 0;
    const bool kl_in_loss = use_ref && (!ppo || job_.ppo().kl_mode() == "loss");
    double total_tokens = 0;
    for (int i = 0; i < batch.samples_size(); ++i) {
      const v1::TrainSample& s = batch.samples(i);
      const int n = s.response_tokens_size();
      if (n == 0 || s.old_logprobs_size() != n || (use_ref && s.ref_logprobs_size() != n)) {
        return absl::InvalidArgumentError(absl::StrCat(
            options_.worker_id, ": train sample ", i, " has ", n,
            " response tokens, ", s.old_logprobs_size(), " old log-probs and ",
            s.ref_logprobs_size(), " reference log-probs; expected equal, non-zero",
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
        values = value_head_(hidden).squeeze(-1) * tb->response_mask;
      } else {
        logp = model::TargetLogProbs(model_, *tb, temperature);
      }
      torch::Tensor old_logp = model::PlaceResponseValues(old_rows, *tb);
      torch::Tensor ref_logp =
          kl_in_loss ? model::PlaceResponseValues(ref_rows, *tb) : torch::Tensor();
      torch::Tensor adv = ppo ? model::PlaceResponseValues(
                                    Rows(targets.advantages, begin, end), *tb)
                              : torch::tensor(advantages, torch::kFloat32);
      PolicyLoss loss = ClippedPolicyLoss(logp, old_logp, ref_logp, adv, tb->response_mask,
                                          clip_low, clip_high, kl_in_loss ? grpo.kl_coef() : 0,
                                          grpo.loss_aggregation(), normalizer);
      MicroResult r{loss.loss, loss.kl_sum, loss.clipped_tokens, loss.tokens};
      if (value_head_) {
        MicroResult v = ValueLoss(values, *tb, targets, begin, end, total_tokens);
        r.loss = r.loss + job_.ppo().vf_coef() * v.loss;
        r.value_loss = v.value_loss;
        r.value_clipped = v.value_clipped;
      }
      return r;
    };
    std::vector<torch::Tensor> params = model_->parameters();
    if (value_head_) params.push_back(value_head_->weight);
    EnsureOptimizer(rl_, std::move(params), grpo.optimizer());
    absl::StatusOr<v1::TrainStats> stats =
        Update(rl_, grpo.optimizer(), batch.samples_size(), micro);
    if (!stats.ok()) return stats;
    if (critic_) {
      MicroFn critic_micro = [&](int64_t begin, int64_t end) -> absl::StatusOr<MicroResult> {
        absl::StatusOr<model::TokenBatch> tb = SampleBatch(batch, begin, end);
        if (!tb.ok()) return tb.status();
        return ValueLoss(model::ResponseValues(critic_, *tb), *tb, targets, begin, end,
                         total_tokens);
      };
      EnsureOptimizer(critic_phase_, critic_->parameters(), job_.ppo().critic_optimizer());
      absl::StatusOr<v1::TrainStats> critic =
          Update(critic_phase_, job_.ppo().critic_optimizer(), batch.samples_size(),
                 critic_micro);
      if (!critic.ok()) return critic.status();
      stats->set_value_loss(critic->value_loss());
      stats->set_value_clip_fraction(critic->value_clip_fraction());
      stats->set_activation_bytes(
          std::max(stats->activation_bytes(), critic->activation_bytes()));
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

  absl::StatusOr<v1::WeightSyncStats> PublishWeights() override {
    return transport_->Publish(version_, model_->NamedWeights());
  }

  absl::Status SaveWeights(const std::string& path) override {
    return SaveNamed(path, model_->NamedWeights());
  }

  absl::Status SaveCheckpoint(const std::string& dir) override {
    if (absl::Status s = SaveWeights(dir + "/weights.safetensors"); !s.ok()) return s;
    if (HasCritic()) {
      if (absl::Status s = SaveNamed(dir + "/critic.safetensors", CriticWeights()); !s.ok()) {
        return s;
      }
    }
    model::NamedTensors state;
    std::map<std::string, std::string> meta = {{"format", kOptimizerFormat},
                                               {"policy_version", absl::StrCat(version_)}};
    try {
      for (auto& [phase, name] : Phases()) {
        meta[name + "_steps"] = absl::StrCat(phase->steps);
        meta[name + "_optimizer"] = phase->optimizer ? "1" : "0";
        meta[name + "_rule"] = PhaseConfig(name).name();
        if (phase->optimizer) {
          internal::AppendOptimizerState(*phase->optimizer, PhaseConfig(name), name + "/", &state);
        }
      }
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat(options_.worker_id, ": gathering optimizer state: ",
                                              e.what_without_backtrace()));
    }
    return model::SaveSafetensors(dir + "/optimizer.safetensors", state, meta);
  }

  absl::Status RestoreCheckpoint(const std::string& dir) override {
    const std::string weights_path = dir + "/weights.safetensors";
    const std::string critic_path = dir + "/critic.safetensors";
    const std::string opt_path = dir + "/optimizer.safetensors";
    std::map<std::string, std::string> meta;
    absl::StatusOr<model::NamedTensors> opt = model::LoadSafetensors(opt_path, &meta);
    if (!opt.ok()) return opt.status();
    if (meta["format"] != kOptimizerFormat) {
      return absl::FailedPreconditionError(absl::StrCat(
          opt_path, ": format \"", meta["format"], "\", expected \"", kOptimizerFormat, "\""));
    }
    absl::StatusOr<int64_t> version = MetaInt(meta, "policy_version", opt_path);
    if (!version.ok()) return version.status();
    absl::StatusOr<model::NamedTensors> weights = LoadPart(weights_path, *version, opt_path);
    if (!weights.ok()) return weights.status();
    model::NamedTensors critic_weights;
    if (HasCritic()) {
      absl::StatusOr<model::NamedTensors> c = LoadPart(critic_path, *version, opt_path);
      if (!c.ok()) return c.status();
      critic_weights = *std::move(c);
    }
    // Build fresh optimizers and fill them (nothing live changes), then load
    // the weights, and swap the optimizers in only when everything loaded.
    std::map<std::string, torch::Tensor> tensors(opt->begin(), opt->end());
    std::vector<std::pair<Phase, std::string>> fresh;
    for (auto& [phase, name] : Phases()) {
      Phase restored;
      absl::StatusOr<int64_t> steps = MetaInt(meta, name + "_steps", opt_path);
      if (!steps.ok()) return steps.status();
      absl::StatusOr<int64_t> present = MetaInt(meta, name + "_optimizer", opt_path);
      if (!present.ok()) return present.status();
      restored.steps = *steps;
      // Checkpoints written before OptimizerConfig.name existed are AdamW's.
      const auto rule = meta.find(name + "_rule");
      const std::string saved_rule = rule == meta.end() ? "adamw" : rule->second;
      if (*present != 0 && saved_rule != PhaseConfig(name).name()) {
        return absl::FailedPreconditionError(absl::StrCat(
            opt_path, ": the ", name, " optimizer was saved as \"", saved_rule,
            "\" but the job's is \"", PhaseConfig(name).name(), "\""));
      }
      if (*present != 0) {
        try {
          EnsureOptimizer(restored, PhaseParams(name), PhaseConfig(name));
          if (absl::Status s = internal::LoadOptimizerState(tensors, PhaseConfig(name), name + "/",
                                                            opt_path, *restored.optimizer);
              !s.ok()) {
            return s;
          }
        } catch (const c10::Error& e) {
          return absl::InternalError(absl::StrCat(opt_path, ": restoring the ", name,
                                                  " optimizer: ", e.what_without_backtrace()));
        }
      }
      fresh.emplace_back(std::move(restored), name);
    }
    // Each LoadWeights checks everything before it copies; a policy that
    // does not fit puts the critic back as it was.
    const model::NamedTensors critic_before =
        HasCritic() ? Snapshot(CriticWeights()) : model::NamedTensors();
    if (HasCritic()) {
      if (absl::Status s = LoadCritic(critic_weights); !s.ok()) {
        return NotThisModel(s, critic_path);
      }
    }
    if (absl::Status s = model_->LoadWeights(*weights); !s.ok()) {
      if (HasCritic()) (void)LoadCritic(critic_before);
      return NotThisModel(s, weights_path);
    }
    for (auto& [restored, name] : fresh) *PhaseNamed(name) = std::move(restored);
    version_ = *version;
    return absl::OkStatus();
  }

  int64_t policy_version() const override { return version_; }

  absl::StatusOr<v1::TrainStats> PreferenceStep(const v1::PreferenceBatch& batch) override {
    absl::StatusOr<MicroFn> micro = PreferenceMicro(batch);
    if (!micro.ok()) return micro.status();
    const v1::OptimizerConfig& config =
        reward_model_ ? job_.reward_model().optimizer() : job_.dpo().optimizer();
    EnsureOptimizer(pref_, model_->parameters(), config);
    absl::StatusOr<v1::TrainStats> stats = Update(pref_, config, batch.pairs_size(), *micro);
    if (!stats.ok()) return stats;
    return Finish(pref_, Stage::kUpdate, *std::move(stats), 0);
  }

  absl::StatusOr<v1::TrainStats> EvalSft(const v1::SftBatch& batch) override {
    return Measure(batch.pairs_size(), SftMicro(batch));
  }

  absl::StatusOr<v1::TrainStats> EvalPreference(const v1::PreferenceBatch& batch) override {
    absl::StatusOr<MicroFn> micro = PreferenceMicro(batch);
    if (!micro.ok()) return micro.status();
    return Measure(batch.pairs_size(), *micro);
  }

 private:
  // Cross-entropy on the target tokens, token mean over the whole batch.
  MicroFn SftMicro(const v1::SftBatch& batch) {
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
      r.loss = SftLoss(model::TargetLogProbs(model_, *tb, 1.0, &hits), tb->response_mask,
                       normalizer);
      r.tokens = tb->response_mask.sum().item<double>();
      // A row is exact when every target token is the argmax.
      r.exact_rows =
          (hits.logical_or(tb->response_mask == 0)).all(1).sum().item<double>();
      return r;
    };
  }

  // The preference loss (job.dpo) over pairs [begin, end): their chosen and
  // rejected responses are the rows of one forward pass, each row's
  // log-probs summed (at sampling.temperature, as the reference scores).
  absl::StatusOr<MicroFn> PreferenceMicro(const v1::PreferenceBatch& batch) {
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
        return absl::InvalidArgumentError(absl::StrCat(
            options_.worker_id, ": preference pair ", i, " has ", p.chosen_tokens_size(),
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
  absl::StatusOr<MicroResult> RunMicro(const MicroFn& micro, int64_t begin, int64_t end) {
    absl::StatusOr<MicroResult> r = micro(begin, end);
    if (!r.ok()) {
      return absl::Status(r.status().code(), absl::StrCat(options_.worker_id, ": rows [", begin,
                                                          ", ", end, "): ", r.status().message()));
    }
    return r;
  }

  // The micro-batches' forward passes without gradients: the batch's loss
  // and stats under the current weights.
  absl::StatusOr<v1::TrainStats> Measure(int64_t rows, const MicroFn& micro) {
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

  bool HasCritic() const { return !critic_.is_empty() || !value_head_.is_empty(); }

  // The optimizer phases a checkpoint holds, under their names.
  std::vector<std::pair<Phase*, std::string>> Phases() {
    std::vector<std::pair<Phase*, std::string>> phases = {{&sft_, "sft"}, {&rl_, "rl"}};
    if (!critic_.is_empty()) phases.emplace_back(&critic_phase_, "critic");
    return phases;
  }
  Phase* PhaseNamed(const std::string& name) {
    return name == "sft" ? &sft_ : name == "rl" ? &rl_ : &critic_phase_;
  }
  std::vector<torch::Tensor> PhaseParams(const std::string& name) {
    if (name == "critic") return critic_->parameters();
    std::vector<torch::Tensor> params = model_->parameters();
    if (name == "rl" && value_head_) params.push_back(value_head_->weight);
    return params;
  }
  const v1::OptimizerConfig& PhaseConfig(const std::string& name) const {
    return name == "sft" ? job_.sft().optimizer()
           : name == "rl" ? job_.grpo().optimizer()
                          : job_.ppo().critic_optimizer();
  }

  // The critic's weights: the separate critic's (Llama names plus "score"),
  // or the shared trunk's value head ("value_head.weight").
  model::NamedTensors CriticWeights() const {
    if (!critic_.is_empty()) return critic_->NamedWeights();
    return {{"value_head.weight", value_head_->weight}};
  }
  absl::Status LoadCritic(const model::NamedTensors& weights) {
    if (!critic_.is_empty()) return critic_->LoadWeights(weights);
    if (weights.size() != 1 || weights[0].first != "value_head.weight" ||
        weights[0].second.sizes() != value_head_->weight.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expected one tensor value_head.weight of shape [1, ", job_.model().d_model(), "]"));
    }
    torch::NoGradGuard no_grad;
    value_head_->weight.copy_(weights[0].second);
    return absl::OkStatus();
  }

  // The tensors of a checkpoint's weights file, whose policy_version must
  // be `version` (that of `opt_path`, the optimizer file).
  static absl::StatusOr<model::NamedTensors> LoadPart(const std::string& path, int64_t version,
                                                      const std::string& opt_path) {
    std::map<std::string, std::string> meta;
    absl::StatusOr<model::NamedTensors> tensors = model::LoadSafetensors(path, &meta);
    if (!tensors.ok()) return tensors.status();
    absl::StatusOr<int64_t> part_version = MetaInt(meta, "policy_version", path);
    if (!part_version.ok()) return part_version.status();
    if (*part_version != version) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": policy_version ", *part_version, " but ", opt_path, " has ", version,
          " (files from different checkpoints)"));
    }
    return tensors;
  }

  static model::NamedTensors Snapshot(const model::NamedTensors& weights) {
    model::NamedTensors out;
    for (const auto& [name, tensor] : weights) out.emplace_back(name, tensor.detach().clone());
    return out;
  }

  // A well-formed file that does not fit this model: a checkpoint of
  // another job, not bad input to this call.
  static absl::Status NotThisModel(const absl::Status& s, const std::string& path) {
    const absl::StatusCode code = s.code() == absl::StatusCode::kInvalidArgument
                                      ? absl::StatusCode::kFailedPrecondition
                                      : s.code();
    return absl::Status(code, absl::StrCat(path, ": ", s.message()));
  }

  absl::Status SaveNamed(const std::string& path, const model::NamedTensors& named) {
    model::NamedTensors weights;
    for (const auto& [name, tensor] : named) weights.emplace_back(name, tensor.detach());
    return model::SaveSafetensors(path, weights,
                                  {{"policy_version", absl::StrCat(version_)}});
  }

  static std::vector<absl::Span<const float>> Rows(const std::vector<std::vector<float>>& rows,
                                                   int64_t begin, int64_t end) {
    return std::vector<absl::Span<const float>>(rows.begin() + begin, rows.begin() + end);
  }

  absl::StatusOr<model::TokenBatch> SampleBatch(const v1::TrainBatch& batch, int64_t begin,
                                                int64_t end) const {
    std::vector<model::SequencePair> pairs;
    for (int64_t i = begin; i < end; ++i) {
      pairs.push_back({batch.samples(i).prompt_tokens(), batch.samples(i).response_tokens()});
    }
    return model::MakeTokenBatch(pairs, options_.pad_id, job_.model().max_seq_len());
  }

  // The critic's current values of the rows' response tokens, [B, T].
  torch::Tensor CriticValues(const model::TokenBatch& tb) {
    if (value_head_) return value_head_(model_->Hidden(tb.inputs)).squeeze(-1) * tb.response_mask;
    return model::ResponseValues(critic_, tb);
  }

  // PPO's clipped value loss of rows [begin, end) (token mean over the
  // batch's `total_tokens`), as a micro-batch result.
  MicroResult ValueLoss(const torch::Tensor& values, const model::TokenBatch& tb,
                        const PpoTargets& targets, int64_t begin, int64_t end,
                        double total_tokens) const {
    const double clip = job_.ppo().value_clip();
    const torch::Tensor old_values =
        model::PlaceResponseValues(Rows(targets.values, begin, end), tb);
    const torch::Tensor returns = model::PlaceResponseValues(Rows(targets.returns, begin, end), tb);
    MicroResult r;
    r.loss = ClippedValueLoss(values, old_values, returns, tb.response_mask, clip,
                              std::max(1.0, total_tokens));
    r.value_loss = r.loss.item<double>();
    r.tokens = tb.response_mask.sum().item<double>();
    if (clip > 0) {
      r.value_clipped =
          (((values.detach() - old_values).abs() > clip).to(torch::kFloat32) * tb.response_mask)
              .sum()
              .item<double>();
    }
    return r;
  }

  // Before the update: the critic's values, each token's reward (the
  // sample's reward on its last token; with kl_mode reward, minus kl_coef
  // times log pi_old - log pi_ref on every token), GAE, and the batch-
  // whitened advantages.
  absl::StatusOr<PpoTargets> ComputePpoTargets(const v1::TrainBatch& batch) {
    const auto& ppo = job_.ppo();
    const double kl_coef = job_.grpo().kl_coef();
    const bool kl_in_reward = kl_coef > 0 && ppo.kl_mode() == "reward";
    const int64_t rows = batch.samples_size();
    const int64_t micro_rows = std::max(1, job_.grpo().micro_batch_size());
    PpoTargets t;
    try {
      torch::NoGradGuard no_grad;
      for (int64_t begin = 0; begin < rows; begin += micro_rows) {
        const int64_t end = std::min(rows, begin + micro_rows);
        absl::StatusOr<model::TokenBatch> tb = SampleBatch(batch, begin, end);
        if (!tb.ok()) {
          return absl::Status(tb.status().code(),
                              absl::StrCat(options_.worker_id, ": rows [", begin, ", ", end,
                                           "): ", tb.status().message()));
        }
        const torch::Tensor values = CriticValues(*tb);
        torch::Tensor rewards = torch::zeros_like(tb->response_mask);
        auto acc = rewards.accessor<float, 2>();
        std::vector<absl::Span<const float>> old_rows, ref_rows;
        for (int64_t i = begin; i < end; ++i) {
          const int64_t row = i - begin;
          acc[row][tb->response_start[row] + tb->response_length[row] - 1] =
              batch.samples(i).reward();
          old_rows.emplace_back(batch.samples(i).old_logprobs());
          ref_rows.emplace_back(batch.samples(i).ref_logprobs());
        }
        if (kl_in_reward) {
          const torch::Tensor k1 = (model::PlaceResponseValues(old_rows, *tb) -
                                    model::PlaceResponseValues(ref_rows, *tb)) *
                                   tb->response_mask;
          rewards = rewards - kl_coef * k1;
          t.kl_sum += k1.sum().item<double>();
        }
        const Gae gae = ComputeGae(rewards, values, tb->response_mask, ppo.gamma(), ppo.lam());
        for (int64_t row = 0; row < end - begin; ++row) {
          t.advantages.push_back(model::RowResponseValues(gae.advantages, *tb, row));
          t.returns.push_back(model::RowResponseValues(gae.returns, *tb, row));
          t.values.push_back(model::RowResponseValues(values, *tb, row));
        }
      }
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat(options_.worker_id, ": PPO advantages: ",
                                              e.what_without_backtrace()));
    }
    if (ppo.whiten_advantages()) {
      double sum = 0, sq = 0, n = 0;
      for (const auto& row : t.advantages) {
        for (float a : row) sum += a, sq += static_cast<double>(a) * a, ++n;
      }
      const double mean = n > 0 ? sum / n : 0;
      const double std = n > 0 ? std::sqrt(std::max(0.0, sq / n - mean * mean)) : 0;
      for (auto& row : t.advantages) {
        for (float& a : row) a = static_cast<float>((a - mean) / (std + 1e-8));
      }
    }
    return t;
  }

  // zero_grad; the micro-batches' forward and backward; clip; warm-up; step.
  absl::StatusOr<v1::TrainStats> Update(Phase& phase, const v1::OptimizerConfig& config,
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
    try {
      optimizer.zero_grad();
      for (int64_t begin = 0; begin < rows; begin += micro_rows) {
        const int64_t live_before = tracker.live_bytes();
        window.emplace();
        absl::StatusOr<MicroResult> r = RunMicro(micro, begin, std::min(rows, begin + micro_rows));
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
      stats.set_grad_norm(torch::nn::utils::clip_grad_norm_(phase.params, max_norm));
      const double warmup = config.warmup_steps();
      const double lr =
          config.lr() * (warmup > 0 ? std::min(1.0, (phase.steps + 1) / warmup) : 1.0);
      internal::SetLearningRate(optimizer, lr);
      optimizer.step();
      peak.Observe(window->peak_bytes(), live_before_step, 0, tracker.live_bytes());
      window.reset();
      ++phase.steps;
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat(options_.worker_id, ": update at version ",
                                              version_, ": ", e.what_without_backtrace()));
    }
    sums.Fill(rows, &stats);
    stats.set_activation_bytes(activation_bytes);
    return stats;
  }

  // After a policy update: the new version, and the learner's resident
  // objects in `stats` and the ledger (`buffer_bytes`: the rollout buffer
  // the update trained on, 0 when it kept none).
  v1::TrainStats Finish(Phase& phase, Stage stage, v1::TrainStats stats,
                        int64_t buffer_bytes) {
    ++version_;
    int64_t param_bytes = 0, grad_bytes = 0;
    for (const auto& p : model_->parameters()) {
      param_bytes += p.nbytes();
      if (p.grad().defined()) grad_bytes += p.grad().nbytes();
    }
    stats.set_policy_version(version_);
    stats.set_parameter_bytes(param_bytes);
    stats.set_gradient_bytes(grad_bytes);
    stats.set_optimizer_state_bytes(internal::OptimizerStateBytes(*phase.optimizer));
    if (ledger_ != nullptr) {
      const std::string& id = options_.worker_id;
      // Every policy phase's optimizer stays resident (checkpoints hold them
      // all), so the object is their sum.
      int64_t optimizer_bytes = 0;
      for (Phase* p : {&sft_, &rl_, &pref_}) {
        if (p->optimizer) optimizer_bytes += internal::OptimizerStateBytes(*p->optimizer);
      }
      ledger_->RecordObject(id, Object::kParameters, param_bytes, stage);
      ledger_->RecordObject(id, Object::kGradients, grad_bytes, stage);
      ledger_->RecordObject(id, Object::kOptimizerState, optimizer_bytes, stage);
      // Transients at the update's peak, then freed: they count only in the
      // span of this update (attribution.h).
      ledger_->RecordObject(id, Object::kActivations, stats.activation_bytes(), stage);
      ledger_->RecordObject(id, Object::kWorkspace, peak_.workspace, stage);
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

  // What the critic holds: weights and gradients, and the separate
  // critic's optimizer state (a shared value head's is in the policy's).
  int64_t CriticBytes() {
    int64_t bytes = 0;
    for (const auto& [name, p] : CriticWeights()) {
      bytes += p.nbytes();
      if (p.grad().defined()) bytes += p.grad().nbytes();
    }
    if (critic_phase_.optimizer) bytes += internal::OptimizerStateBytes(*critic_phase_.optimizer);
    return bytes;
  }

  // The highest live bytes of the Updates since the last Finish and what it held beyond what
  // was live before: the forward's saved activations and the scratch of
  // the backward or optimizer step (workspace). Memory an update leaves
  // behind (the first step's gradients and optimizer state) is not workspace.
  struct UpdatePeak {
    int64_t bytes = 0;
    int64_t workspace = 0;
    // `peak` seen in a window that opened at `base` live bytes, holding
    // `saved` activations; `after`: live bytes once the window's work ended.
    void Observe(int64_t peak, int64_t base, int64_t saved, int64_t after) {
      if (peak <= bytes) return;
      bytes = peak;
      workspace = std::max<int64_t>(0, peak - base - saved - std::max<int64_t>(0, after - base));
    }
  };

  const v1::JobConfig job_;
  // algorithm "reward_model": model_ has a scalar head.
  const bool reward_model_ = job_.algorithm() == "reward_model";
  const LocalLearnerOptions options_;
  UpdatePeak peak_;
  weightsync::Transport* transport_;
  ledger::Ledger* ledger_;
  model::Transformer model_{nullptr};
  // PPO: a separate critic, or a value head on the policy's trunk.
  model::Transformer critic_{nullptr};
  torch::nn::Linear value_head_{nullptr};
  Phase sft_;
  Phase rl_;
  Phase critic_phase_;
  // Preference steps (dpo, online_dpo), with dpo.optimizer; not in
  // checkpoints (config refuses checkpoint_every for those recipes).
  Phase pref_;
  int64_t version_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LearnerWorker>> NewLocalLearner(
    const v1::JobConfig& job, const LocalLearnerOptions& options,
    weightsync::Transport* transport, ledger::Ledger* ledger) {
  auto learner = std::make_unique<LocalLearner>(job, options, transport, ledger);
  if (absl::Status s = learner->Init(); !s.ok()) return s;
  return std::unique_ptr<LearnerWorker>(std::move(learner));
}

}  // namespace trellis::learner
