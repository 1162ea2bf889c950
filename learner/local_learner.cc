#include "learner/local_learner.h"

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "learner/internal/adamw_state.h"
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
};
using MicroFn = std::function<absl::StatusOr<MicroResult>(int64_t begin, int64_t end)>;

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

std::unique_ptr<torch::optim::AdamW> NewAdamW(model::Transformer& model,
                                              const v1::OptimizerConfig& config) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model->parameters()) {
    if (!p.requires_grad()) continue;
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  }
  auto options = [&](double weight_decay) {
    auto o = std::make_unique<torch::optim::AdamWOptions>(config.lr());
    o->betas({config.beta1(), config.beta2()}).eps(config.eps()).weight_decay(weight_decay);
    return o;
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(config.weight_decay()));
  groups.emplace_back(no_decay, options(0.0));
  return std::make_unique<torch::optim::AdamW>(
      std::move(groups), torch::optim::AdamWOptions(config.lr()));
}

int64_t OptimizerStateBytes(torch::optim::AdamW& optimizer) {
  int64_t bytes = 0;
  for (const auto& [key, state] : optimizer.state()) {
    auto* adam = dynamic_cast<torch::optim::AdamWParamState*>(state.get());
    if (adam == nullptr) continue;
    for (const torch::Tensor& t :
         {adam->exp_avg(), adam->exp_avg_sq(), adam->max_exp_avg_sq()}) {
      if (t.defined()) bytes += t.nbytes();
    }
  }
  return bytes;
}

class LocalLearner : public LearnerWorker {
 public:
  LocalLearner(const v1::JobConfig& job, const LocalLearnerOptions& options,
               weightsync::Transport* transport, ledger::Ledger* ledger)
      : job_(job), options_(options), transport_(transport), ledger_(ledger) {}

  absl::Status Init() {
    try {
      torch::manual_seed(options_.seed);
      model_ = model::Transformer(job_.model(), options_.vocab_size);
      model_->train();
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
    double total_tokens = 0;
    for (const auto& pair : batch.pairs()) total_tokens += pair.target_tokens_size();
    const double normalizer = LossNormalizer(v1::TOKEN_MEAN, total_tokens, batch.pairs_size());
    MicroFn micro = [&](int64_t begin, int64_t end) -> absl::StatusOr<MicroResult> {
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
    if (sft_.optimizer == nullptr) sft_.optimizer = NewAdamW(model_, job_.sft().optimizer());
    return Update(sft_, job_.sft().optimizer(), Stage::kSft, batch.pairs_size(), micro);
  }

  absl::StatusOr<v1::TrainStats> TrainStep(const v1::TrainBatch& batch) override {
    const auto& grpo = job_.grpo();
    const bool use_kl = grpo.kl_coef() > 0;
    double total_tokens = 0;
    for (int i = 0; i < batch.samples_size(); ++i) {
      const v1::TrainSample& s = batch.samples(i);
      const int n = s.response_tokens_size();
      if (n == 0 || s.old_logprobs_size() != n || (use_kl && s.ref_logprobs_size() != n)) {
        return absl::InvalidArgumentError(absl::StrCat(
            options_.worker_id, ": train sample ", i, " has ", n,
            " response tokens, ", s.old_logprobs_size(), " old log-probs and ",
            s.ref_logprobs_size(), " reference log-probs; expected equal, non-zero",
            use_kl ? "" : " (reference log-probs may be empty: kl_coef is 0)"));
      }
      total_tokens += n;
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
      torch::Tensor logp = model::TargetLogProbs(model_, *tb, temperature);
      torch::Tensor old_logp = model::PlaceResponseValues(old_rows, *tb);
      torch::Tensor ref_logp =
          use_kl ? model::PlaceResponseValues(ref_rows, *tb) : torch::Tensor();
      PolicyLoss loss = ClippedPolicyLoss(logp, old_logp, ref_logp,
                                          torch::tensor(advantages, torch::kFloat32),
                                          tb->response_mask, clip_low, clip_high,
                                          grpo.kl_coef(), grpo.loss_aggregation(), normalizer);
      return MicroResult{loss.loss, loss.kl_sum, loss.clipped_tokens, loss.tokens};
    };
    if (rl_.optimizer == nullptr) rl_.optimizer = NewAdamW(model_, grpo.optimizer());
    return Update(rl_, grpo.optimizer(), Stage::kUpdate, batch.samples_size(), micro);
  }

  absl::StatusOr<v1::WeightSyncStats> PublishWeights() override {
    return transport_->Publish(version_, model_->NamedWeights());
  }

  absl::Status SaveWeights(const std::string& path) override {
    model::NamedTensors weights;
    for (auto& [name, tensor] : model_->NamedWeights()) {
      weights.emplace_back(name, tensor.detach());
    }
    return model::SaveSafetensors(
        path, weights, {{"policy_version", absl::StrCat(version_)}});
  }

  absl::Status SaveCheckpoint(const std::string& dir) override {
    const std::string weights_path = dir + "/weights.safetensors";
    if (absl::Status s = SaveWeights(weights_path); !s.ok()) return s;
    model::NamedTensors state;
    std::map<std::string, std::string> meta = {
        {"format", kOptimizerFormat},
        {"policy_version", absl::StrCat(version_)},
        {"sft_steps", absl::StrCat(sft_.steps)},
        {"rl_steps", absl::StrCat(rl_.steps)},
        {"sft_optimizer", sft_.optimizer ? "1" : "0"},
        {"rl_optimizer", rl_.optimizer ? "1" : "0"}};
    try {
      if (sft_.optimizer) internal::AppendAdamWState(*sft_.optimizer, "sft/", &state);
      if (rl_.optimizer) internal::AppendAdamWState(*rl_.optimizer, "rl/", &state);
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat(options_.worker_id, ": gathering optimizer state: ",
                                              e.what_without_backtrace()));
    }
    return model::SaveSafetensors(dir + "/optimizer.safetensors", state, meta);
  }

  absl::Status RestoreCheckpoint(const std::string& dir) override {
    const std::string weights_path = dir + "/weights.safetensors";
    const std::string opt_path = dir + "/optimizer.safetensors";
    std::map<std::string, std::string> weights_meta, meta;
    absl::StatusOr<model::NamedTensors> weights =
        model::LoadSafetensors(weights_path, &weights_meta);
    if (!weights.ok()) return weights.status();
    absl::StatusOr<model::NamedTensors> opt = model::LoadSafetensors(opt_path, &meta);
    if (!opt.ok()) return opt.status();
    if (meta["format"] != kOptimizerFormat) {
      return absl::FailedPreconditionError(absl::StrCat(
          opt_path, ": format \"", meta["format"], "\", expected \"", kOptimizerFormat, "\""));
    }
    absl::StatusOr<int64_t> version = MetaInt(meta, "policy_version", opt_path);
    if (!version.ok()) return version.status();
    absl::StatusOr<int64_t> weights_version =
        MetaInt(weights_meta, "policy_version", weights_path);
    if (!weights_version.ok()) return weights_version.status();
    if (*weights_version != *version) {
      return absl::FailedPreconditionError(absl::StrCat(
          weights_path, ": policy_version ", *weights_version, " but ", opt_path, " has ",
          *version, " (files from different checkpoints)"));
    }
    std::map<std::string, torch::Tensor> tensors(opt->begin(), opt->end());
    // Build fresh optimizers, fill them, and swap them in only when the
    // weights load too.
    Phase sft, rl;
    for (auto [phase, name, config] :
         {std::make_tuple(&sft, std::string("sft"), &job_.sft().optimizer()),
          std::make_tuple(&rl, std::string("rl"), &job_.grpo().optimizer())}) {
      absl::StatusOr<int64_t> steps = MetaInt(meta, name + "_steps", opt_path);
      if (!steps.ok()) return steps.status();
      absl::StatusOr<int64_t> present = MetaInt(meta, name + "_optimizer", opt_path);
      if (!present.ok()) return present.status();
      phase->steps = *steps;
      if (*present == 0) continue;
      try {
        phase->optimizer = NewAdamW(model_, *config);
        if (absl::Status s = internal::LoadAdamWState(tensors, name + "/", opt_path,
                                                      *phase->optimizer);
            !s.ok()) {
          return s;
        }
      } catch (const c10::Error& e) {
        return absl::InternalError(absl::StrCat(opt_path, ": restoring the ", name,
                                                " optimizer: ", e.what_without_backtrace()));
      }
    }
    if (absl::Status s = model_->LoadWeights(*weights); !s.ok()) {
      // A well-formed file that does not fit this model: a checkpoint of
      // another job, not bad input to this call.
      const absl::StatusCode code = s.code() == absl::StatusCode::kInvalidArgument
                                        ? absl::StatusCode::kFailedPrecondition
                                        : s.code();
      return absl::Status(code, absl::StrCat(weights_path, ": ", s.message()));
    }
    sft_ = std::move(sft);
    rl_ = std::move(rl);
    version_ = *version;
    return absl::OkStatus();
  }

  int64_t policy_version() const override { return version_; }

 private:
  // One training phase's optimizer and how many steps it has taken.
  struct Phase {
    std::unique_ptr<torch::optim::AdamW> optimizer;
    int64_t steps = 0;
  };

  // zero_grad; the micro-batches' forward and backward; clip; warm-up; step.
  absl::StatusOr<v1::TrainStats> Update(Phase& phase, const v1::OptimizerConfig& config,
                                        Stage stage, int64_t rows, const MicroFn& micro) {
    torch::optim::AdamW& optimizer = *phase.optimizer;
    if (rows == 0) {
      return absl::InvalidArgumentError(absl::StrCat(options_.worker_id, ": empty batch"));
    }
    const int64_t micro_rows = std::max(1, job_.grpo().micro_batch_size());
    ledger::MemoryTracker& tracker = ledger::MemoryTracker::Get();
    v1::TrainStats stats;
    double kl_sum = 0, clipped = 0, tokens = 0, exact_rows = 0;
    int64_t activation_bytes = 0;
    try {
      optimizer.zero_grad();
      for (int64_t begin = 0; begin < rows; begin += micro_rows) {
        const int64_t end = std::min(rows, begin + micro_rows);
        const int64_t live_before = tracker.live_bytes();
        absl::StatusOr<MicroResult> r = micro(begin, end);
        if (!r.ok()) {
          return absl::Status(r.status().code(),
                              absl::StrCat(options_.worker_id, ": rows [", begin, ", ",
                                           end, "): ", r.status().message()));
        }
        // What the forward pass keeps alive for backward.
        activation_bytes = std::max(activation_bytes, tracker.live_bytes() - live_before);
        r->loss.backward();
        stats.set_loss(stats.loss() + r->loss.item<double>());
        kl_sum += r->kl_sum;
        clipped += r->clipped_tokens;
        tokens += r->tokens;
        exact_rows += r->exact_rows;
        stats.set_micro_batches(stats.micro_batches() + 1);
      }
      const double max_norm = config.max_grad_norm() > 0 ? config.max_grad_norm() : 1e30;
      stats.set_grad_norm(torch::nn::utils::clip_grad_norm_(model_->parameters(), max_norm));
      const double warmup = config.warmup_steps();
      const double lr =
          config.lr() * (warmup > 0 ? std::min(1.0, (phase.steps + 1) / warmup) : 1.0);
      for (auto& group : optimizer.param_groups()) {
        static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
      }
      optimizer.step();
      ++phase.steps;
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat(options_.worker_id, ": update at version ",
                                              version_, ": ", e.what_without_backtrace()));
    }
    ++version_;
    int64_t param_bytes = 0, grad_bytes = 0;
    for (const auto& p : model_->parameters()) {
      param_bytes += p.nbytes();
      if (p.grad().defined()) grad_bytes += p.grad().nbytes();
    }
    stats.set_kl(tokens > 0 ? kl_sum / tokens : 0);
    stats.set_clip_fraction(tokens > 0 ? clipped / tokens : 0);
    stats.set_trained_tokens(static_cast<int64_t>(tokens));
    stats.set_sequence_accuracy(exact_rows / rows);
    stats.set_policy_version(version_);
    stats.set_parameter_bytes(param_bytes);
    stats.set_gradient_bytes(grad_bytes);
    stats.set_optimizer_state_bytes(OptimizerStateBytes(optimizer));
    stats.set_activation_bytes(activation_bytes);
    if (ledger_ != nullptr) {
      const std::string& id = options_.worker_id;
      ledger_->RecordObject(id, Object::kParameters, param_bytes, stage);
      ledger_->RecordObject(id, Object::kGradients, grad_bytes, stage);
      ledger_->RecordObject(id, Object::kOptimizerState, stats.optimizer_state_bytes(), stage);
      ledger_->RecordObject(id, Object::kActivations, activation_bytes, stage);
    }
    return stats;
  }

  const v1::JobConfig job_;
  const LocalLearnerOptions options_;
  weightsync::Transport* transport_;
  ledger::Ledger* ledger_;
  model::Transformer model_{nullptr};
  Phase sft_;
  Phase rl_;
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
