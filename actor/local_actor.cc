#include "actor/local_actor.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "actor/internal/engine.h"
#include "actor/internal/request_checks.h"
#include "actor/internal/actor_model.h"
#include "actor/torch_guard.h"
#include "config/flops.h"
#include "ledger/memory_tracker.h"
#include "model/offload.h"
#include "model/routing_record.h"
#include "model/tensor_parallel.h"
#include "model/torch_status.h"
#include "model/transformer.h"
#include "weightsync/fingerprint.h"
#include "weightsync/reshard_ends.h"

namespace trellis::actor {
namespace {

class LocalActor : public RolloutWorker {
 public:
  // The rollouts run on built.parallel when set, else on built.policy;
  // built.shared_bytes of the base, which another role holds, are not
  // counted here.
  LocalActor(internal::ActorModel built, const text::Tokenizer* tokenizer,
             weightsync::Receiver* receiver, ledger::Ledger* ledger, LocalActorOptions options)
      : tokenizer_(tokenizer),
        receiver_(receiver),
        ledger_(ledger),
        options_(std::move(options)),
        model_(std::move(built.policy)),
        parallel_(built.parallel.get()),
        turns_(options_.turn_cache_bytes) {
    decoder_ = built.parallel ? std::move(built.parallel)
                              : std::unique_ptr<model::Decoder>(
                                    std::make_unique<model::TransformerDecoder>(*model_));
    model_->eval();
    for (auto& p : model_->parameters()) p.set_requires_grad(false);
    if (model_->has_adapters()) {
      // Adapters arrive in buffers of their own, beside the base's
      // fingerprint, and reach the model only once that matches.
      base_fingerprint_ = weightsync::Fingerprint(model_->BaseWeights());
      adapters_ = model_->AdapterWeights();
      for (const auto& [name, tensor] : adapters_) weights_.emplace_back(name, tensor.clone());
      weights_.emplace_back(weightsync::kBaseFingerprint, weightsync::FingerprintTensor(0));
    } else {
      in_place_ = !built.slices.empty();
      weights_ = in_place_ ? std::move(built.slices) : model_->NamedWeights();
    }
    if (ledger_ != nullptr) {
      const std::string& id = options_.worker_id;
      const int64_t held = Bytes(in_place_ ? weights_ : model_->BaseWeights());
      ledger_->RecordObject(id, ledger::Object::kParameters, held - built.shared_bytes,
                            ledger::Stage::kLoad);
      if (!adapters_.empty()) {
        ledger_->RecordObject(id, ledger::Object::kAdapters, Bytes(adapters_),
                              ledger::Stage::kLoad);
        ledger_->RecordObject(id, ledger::Object::kCommunication, Bytes(weights_),
                              ledger::Stage::kLoad);
      }
    }
  }

  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request) override {
    return GenerateUntil(request, nullptr);
  }

  absl::StatusOr<v1::GenerateResponse> GenerateUntil(const v1::GenerateRequest& request,
                                                     const StopFn& stop) override {
    return Run(request, stop, nullptr);
  }

  // Each prompt's group is handed over as soon as its rows have all ended.
  absl::StatusOr<v1::GenerateResponse> GenerateStreaming(const v1::GenerateRequest& request,
                                                         const PartSink& on_part) override {
    if (options_.stream_groups) return Run(request, nullptr, on_part);
    absl::StatusOr<v1::GenerateResponse> response = Run(request, nullptr, nullptr);
    if (response.ok() && on_part) on_part(*response);
    return response;
  }

  absl::StatusOr<v1::WeightSyncStats> SyncWeights(int64_t version) override {
    absl::MutexLock lock(&mu_);
    if (version_ >= version) {
      v1::WeightSyncStats current;
      current.set_version(version_);
      return current;
    }
    // Receive writes into the weights (even when it fails): the cached keys
    // and values were computed with the old ones.
    turns_.Clear();
    if (ledger_ != nullptr) {
      ledger_->RecordObject(options_.worker_id, ledger::Object::kKvCache, 0,
                            ledger::Stage::kWeightSync);
    }
    // Received on the device, where the next call computes with them.
    MoveWeights(ledger::MoveDirection::kIn, ledger::Stage::kWeightSync);
    absl::StatusOr<v1::WeightSyncStats> stats =
        receiver_->Receive(version, weights_, options_.sync_timeout);
    // A resharding sync writes in place: after a failure the weights are no
    // version until the next sync succeeds.
    if (!stats.ok() && dynamic_cast<weightsync::SliceReceiver*>(receiver_) != nullptr) {
      version_ = -1;
    }
    if (!stats.ok()) {
      return absl::Status(stats.status().code(),
                          absl::StrCat(options_.worker_id, ": weight sync to version ", version,
                                       ": ", stats.status().message()));
    }
    if (absl::Status s = ApplyReceived(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(options_.worker_id, ": weight sync to version ",
                                                 stats->version(), ": ", s.message()));
    }
    version_ = stats->version();
    return stats;
  }

  int64_t policy_version() const override {
    absl::MutexLock lock(&mu_);
    return version_;
  }

 private:
  // Samples request.responses_per_prompt responses per prompt (see
  // RolloutWorker): work stops once `stop` (when set) says so; `on_part`
  // (when set) gets each prompt's group as soon as its rows have ended.
  absl::StatusOr<v1::GenerateResponse> Run(const v1::GenerateRequest& request, const StopFn& stop,
                                           const PartSink& on_part) {
    absl::MutexLock lock(&mu_);
    // The caller may have left while an earlier call held the model.
    if (absl::Status s = Stopped(stop, 0); !s.ok()) return s;
    if (version_ < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(options_.worker_id, ": Generate before any weights were received "
                                           "(or after a weight sync that failed midway)"));
    }
    if (absl::Status s =
            internal::CheckRequest(request, model_->config().max_seq_len(), options_.worker_id);
        !s.ok()) {
      return s;
    }
    const int64_t n = std::max(1, request.responses_per_prompt());
    v1::GenerateResponse response;
    if (request.prompts_size() == 0) return response;

    torch::NoGradGuard no_grad;
    MoveWeights(ledger::MoveDirection::kIn, ledger::Stage::kRollout);
    absl::Cleanup idle = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      MoveWeights(ledger::MoveDirection::kOut, ledger::Stage::kRollout);
    };
    // The cache and the sampler's scratch (workspace) at this call's peak.
    const ledger::PeakWindow window;
    const int64_t kept_before = turns_.bytes();  // live at the window's start
    internal::EngineOptions engine;
    engine.share_prefix = options_.share_prefix;
    engine.continuous_batching = options_.continuous_batching;
    // An actor pool under sampling.concurrency AUTO sizes each request's.
    engine.decode_token_budget = request.decode_token_budget() > 0 ? request.decode_token_budget()
                                                                   : options_.decode_token_budget;
    engine.record_routing = options_.record_routing;
    internal::EngineCallbacks callbacks;
    callbacks.is_eos = [this](int32_t token) { return tokenizer_->IsEos(token); };
    callbacks.stopped = [this, &stop](int64_t steps) { return Stopped(stop, steps); };
    if (on_part) {
      callbacks.group_done = [&](int64_t p, const std::vector<internal::EngineRow>& rows) {
        v1::GenerateResponse part;
        for (int64_t r = p * n; r < (p + 1) * n; ++r) {
          ToSample(request.prompts(p), r % n, rows[r], part.add_samples());
        }
        on_part(part);
      };
    }
    absl::StatusOr<internal::EngineResult> run =
        internal::RunEngine(*decoder_, request, tokenizer_->pad_id(), engine, callbacks,
                            options_.turn_cache_bytes > 0 && !options_.record_routing
                                ? &turns_
                                : nullptr);
    // The peak counts the turn cache's entries held at the time; after the
    // call they are what stays.
    const int64_t cache_bytes = std::max(run.ok() ? run->peak_cache_bytes : 0, turns_.bytes());
    if (options_.colocated) turns_.Clear();
    if (ledger_ != nullptr) {
      ledger_->RecordObject(options_.worker_id, ledger::Object::kKvCache, cache_bytes,
                            ledger::Stage::kRollout);
    }
    ReleaseRolloutMemory(window, cache_bytes - kept_before);
    if (!run.ok()) return run.status();

    for (size_t r = 0; r < run->rows.size(); ++r) {
      ToSample(request.prompts(r / n), static_cast<int64_t>(r % n), run->rows[r],
               response.add_samples());
    }
    response.set_kv_cache_bytes(cache_bytes);
    response.set_generated_tokens(run->generated_tokens);
    response.set_prefill_tokens(run->prefill_tokens);
    response.set_forward_flops(config::ForwardFlopsOfWork(
        model_->config(), model_->vocab_size(),
        run->prefill.positions + run->decode.positions,
        run->prefill.attention_pairs + run->decode.attention_pairs));
    response.set_decode_seconds(run->decode.seconds);
    // The bound binds only a continuous batch.
    if (engine.continuous_batching) {
      response.set_decode_token_budget(static_cast<int32_t>(engine.decode_token_budget));
    }
    return response;
  }

  // Response `index` to `prompt`, as the engine's `row` holds it.
  void ToSample(const v1::Prompt& prompt, int64_t index, const internal::EngineRow& row,
                v1::Sample* sample) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    sample->set_prompt_id(prompt.id());
    sample->set_index(static_cast<int32_t>(index));
    *sample->mutable_prompt_tokens() = prompt.token_ids();
    sample->mutable_response_tokens()->Add(row.tokens.begin(), row.tokens.end());
    sample->mutable_logprobs()->Add(row.logprobs.begin(), row.logprobs.end());
    sample->set_response_text(tokenizer_->Decode(row.tokens));
    internal::TagVersions(prompt, index, version_, sample);
    sample->set_truncated(!row.ended && !row.unfinished);
    sample->set_unfinished(row.unfinished);
    sample->set_stop_index(row.stop_index);
    if (options_.record_routing) {
      *sample->mutable_routing() =
          model::MakeRouting(model::RoutingShapeOf(model_->config()), row.routing);
    }
  }

  // Records the workspace's peak over `window`, where the KV cache took
  // `cache_bytes` more than at its start, and that the workspace and the KV
  // cache but for the turn cache are freed when Generate returns.
  void ReleaseRolloutMemory(const ledger::PeakWindow& window, int64_t cache_bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ledger_ == nullptr) return;
    const std::string& id = options_.worker_id;
    ledger_->RecordObject(
        id, ledger::Object::kWorkspace,
        std::max<int64_t>(0, window.peak_bytes() - window.start_live_bytes() - cache_bytes),
        ledger::Stage::kRollout);
    ledger_->RecordObject(id, ledger::Object::kWorkspace, 0, ledger::Stage::kRollout);
    ledger_->RecordObject(id, ledger::Object::kKvCache, turns_.bytes(), ledger::Stage::kRollout);
  }

  // Colocated placement (LocalActorOptions::colocated): the weights in
  // from host memory for a call or a weight sync, or out after a call
  // (otherwise nothing); the move and the parameters' device bytes (0 while
  // out) in the ledger.
  void MoveWeights(ledger::MoveDirection direction, ledger::Stage stage)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!options_.colocated) return;
    // The weights the ledger counts as parameters (under LoRA the frozen
    // base; the adapters are small and stay).
    std::vector<torch::Tensor> base;
    for (const auto& [name, tensor] : model_->BaseWeights()) base.push_back(tensor);
    const model::MoveResult moved =
        direction == ledger::MoveDirection::kOut ? offload_.MoveOut(base) : offload_.MoveIn();
    if (ledger_ == nullptr || moved.tensors == 0) return;
    const std::string& id = options_.worker_id;
    ledger_->RecordMove(id, ledger::Object::kParameters, direction, moved.bytes, moved.seconds,
                        stage);
    ledger_->RecordObject(id, ledger::Object::kParameters,
                          direction == ledger::MoveDirection::kOut ? 0 : moved.bytes, stage);
  }

  // Cancelled when the caller has gone (stop() is true), after `tokens`
  // decode steps.
  absl::Status Stopped(const StopFn& stop, int64_t tokens) const {
    if (!stop || !stop()) return absl::OkStatus();
    return absl::CancelledError(absl::StrCat(options_.worker_id,
                                             ": Generate stopped: its caller has gone (after ",
                                             tokens, " decode steps)"));
  }

  static int64_t Bytes(const weightsync::NamedTensors& tensors) {
    int64_t bytes = 0;
    for (const auto& [name, tensor] : tensors) bytes += static_cast<int64_t>(tensor.nbytes());
    return bytes;
  }

  // What Receive wrote, into what computes: the adapters, the ranks' slices.
  absl::Status ApplyReceived() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status s = adapters_.empty() ? absl::OkStatus() : ApplyAdapters(); !s.ok()) return s;
    if (parallel_ == nullptr || in_place_) return absl::OkStatus();
    return parallel_->LoadWeights(model_->NamedWeights());
  }

  // LoRA: copies the received adapters into the model if the learner
  // trained them on this actor's base; FailedPrecondition (the model
  // unchanged) if not.
  absl::Status ApplyAdapters() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t learner_base = weightsync::FingerprintOf(weights_.back().second);
    if (learner_base != base_fingerprint_) {
      return absl::FailedPreconditionError(
          absl::StrCat("the adapters were trained on a base with fingerprint ",
                       absl::Hex(learner_base, absl::kZeroPad16), ", this actor's base has ",
                       absl::Hex(base_fingerprint_, absl::kZeroPad16),
                       ": learner and actors must build the base from the same runtime.seed "
                       "and model.init_checkpoint"));
    }
    try {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < adapters_.size(); ++i) adapters_[i].second.copy_(weights_[i].second);
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("loading the adapters: ", e.what_without_backtrace()));
    }
    return absl::OkStatus();
  }

  const text::Tokenizer* tokenizer_;
  weightsync::Receiver* receiver_;
  ledger::Ledger* ledger_;
  const LocalActorOptions options_;
  mutable absl::Mutex mu_;
  model::Transformer model_ ABSL_GUARDED_BY(mu_);
  // What the rollouts run on: model_, or the tensor-parallel parallel_.
  std::unique_ptr<model::Decoder> decoder_ ABSL_GUARDED_BY(mu_);
  model::TensorParallelModel* parallel_ ABSL_GUARDED_BY(mu_);
  // Where Receive writes: the model's own weights, the ranks' (in_place_),
  // or under LoRA buffers for the adapters followed by kBaseFingerprint.
  weightsync::NamedTensors weights_ ABSL_GUARDED_BY(mu_);
  bool in_place_ = false;
  // LoRA: the model's adapters and its base's fingerprint; empty and 0
  // without LoRA.
  weightsync::NamedTensors adapters_ ABSL_GUARDED_BY(mu_);
  uint64_t base_fingerprint_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t version_ ABSL_GUARDED_BY(mu_) = -1;
  // Keys and values of rows a later call may go on with (this version's).
  internal::TurnCache turns_ ABSL_GUARDED_BY(mu_);
  // Colocated: the weights' host copies while the actor is idle.
  model::HostOffload offload_ ABSL_GUARDED_BY(mu_);
};

// `status` with its message prefixed by the worker's id.
absl::Status WithId(const std::string& id, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(id, ": ", status.message()));
}

// NewLocalActor's engine, before the LibTorch edge.
absl::StatusOr<std::unique_ptr<RolloutWorker>> BuildLocalActor(const v1::ModelConfig& model,
                                                               const text::Tokenizer* tokenizer,
                                                               weightsync::Receiver* receiver,
                                                               ledger::Ledger* ledger,
                                                               LocalActorOptions options) {
  absl::StatusOr<internal::ActorModel> built =
      internal::BuildActorModel(model, tokenizer->vocab_size(), options, receiver);
  if (!built.ok()) return WithId(options.worker_id, built.status());
  return std::unique_ptr<RolloutWorker>(std::make_unique<LocalActor>(
      *std::move(built), tokenizer, receiver, ledger, std::move(options)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RolloutWorker>> NewLocalActor(const v1::ModelConfig& model,
                                                             const text::Tokenizer* tokenizer,
                                                             weightsync::Receiver* receiver,
                                                             ledger::Ledger* ledger,
                                                             LocalActorOptions options) {
  const std::string id = options.worker_id;
  if (options.decode_token_budget < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(id, ": decode_token_budget must be >= 0 (0: no limit), found ",
                     options.decode_token_budget));
  }
  if (options.turn_cache_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        id, ": turn_cache_bytes must be >= 0 (0: off), found ", options.turn_cache_bytes));
  }
  if (options.tensor_parallel > 1 && options.colocated) {
    return absl::InvalidArgumentError(
        absl::StrCat(id, ": tensor_parallel > 1 with the colocated placement is not supported"));
  }
  absl::StatusOr<std::unique_ptr<RolloutWorker>> actor = model::TorchEdge(id).Call(
      "build", [&] { return BuildLocalActor(model, tokenizer, receiver, ledger, options); });
  if (!actor.ok()) return actor.status();
  return GuardTorchErrors(*std::move(actor), id);
}

}  // namespace trellis::actor
