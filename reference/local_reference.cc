#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "config/flops.h"
#include "config/recipe.h"
#include "config/worker_id.h"
#include "env/env.h"
#include "env/regular_file.h"
#include "ledger/memory_tracker.h"
#include "model/hf_model.h"
#include "model/offload.h"
#include "model/safetensors.h"
#include "model/shared_base.h"
#include "model/tensor_parallel.h"
#include "model/token_batch.h"
#include "model/torch_device.h"
#include "model/torch_status.h"
#include "model/transformer.h"
#include "reference/reference_worker.h"
#include "reference/torch_guard.h"

namespace trellis::reference {
namespace {

int64_t ParameterBytes(model::Transformer& model) {
  int64_t bytes = 0;
  for (const auto& p : model->parameters()) bytes += p.nbytes();
  return bytes;
}

// A frozen model of `config` with `head` on `device`, its weights copied
// there from `path`: a safetensors file of Trellis's names, or a Hugging
// Face directory (one with config.json; a language-model head only);
// `what` names it in errors.
absl::StatusOr<model::Transformer> LoadFrozen(const v1::ModelConfig& config, int64_t vocab_size,
                                              model::Head head, const torch::Device& device,
                                              const std::string& path, const std::string& what) {
  const bool hf_dir = env::Env::Default()->Exists(absl::StrCat(path, "/config.json"));
  absl::StatusOr<model::NamedTensors> weights =
      hf_dir ? model::NamedTensors() : model::LoadSafetensors(path);
  if (!weights.ok()) return weights.status();
  // Built without drawing values (they are overwritten), so loading never
  // moves the global generator: a resumed run loads the reference after
  // restoring the generator, a straight run before its first step.
  model::Transformer model(config, vocab_size, head, v1::LoraConfig(),
                           model::InitialValues::kOverwritten);
  model->to(device);
  model->eval();
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  absl::Status s = hf_dir ? model::FillFromHfDir(path, model) : model->LoadWeights(*weights);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(what, " ", path, ": ", s.message()));
  return model;
}

class LocalReference : public ReferenceWorker {
 public:
  LocalReference(const v1::JobConfig& job, const text::Tokenizer* tokenizer, ledger::Ledger* ledger,
                 std::string id, const model::Device& device,
                 std::shared_ptr<const model::SharedBase> shared_base,
                 const std::vector<model::Device>& rank_devices)
      : id_(std::move(id)),
        device_(model::TorchDevice(device)),
        rank_devices_(model::TorchDevices(rank_devices)),
        teacher_(config::ReferenceIsTeacher(job)),
        config_(config::ReferenceModel(job)),
        tokenizer_(tokenizer),
        temperature_(job.sampling().temperature()),
        offload_(job.memory().offload_frozen() ||
                 job.deployment().placement() == v1::DeploymentConfig::COLOCATED),
        tensor_parallel_(job.deployment().reference().tensor_parallel()),
        ledger_(ledger),
        shared_base_(offload_ ? nullptr : std::move(shared_base)) {}

  // Loads the distill teacher or the job's reward model, if it has one.
  absl::Status Init(const v1::JobConfig& job) {
    if (tensor_parallel_ > 1 && offload_) {
      return absl::InvalidArgumentError(
          "reference: deployment.reference.tensor_parallel > 1 is not supported with "
          "memory.offload_frozen or the colocated placement (its ranks do not move)");
    }
    if (teacher_) return LoadTeacher();
    if (config::RecipeOf(job) != config::Recipe::kPpo ||
        job.ppo().reward() != v1::PpoConfig::REWARD_MODEL) {
      return absl::OkStatus();
    }
    absl::StatusOr<model::Transformer> rm =
        LoadFrozen(config_, tokenizer_->vocab_size(), model::Head::kScalar, device_,
                   job.ppo().reward_model_path(), "ppo.reward_model_path");
    if (!rm.ok()) return rm.status();
    reward_model_ = *std::move(rm);
    if (ledger_ != nullptr) {
      ledger_->RecordObject(id_, ledger::Object::kRewardModel,
                            ParameterBytes(reward_model_), ledger::Stage::kLoad);
    }
    Move(reward_model_, reward_offload_, ledger::Object::kRewardModel, ledger::MoveDirection::kOut,
         ledger::Stage::kLoad);
    return absl::OkStatus();
  }

  absl::Status Load(const std::string& weights_path) override {
    if (teacher_) {
      return absl::FailedPreconditionError(
          "reference: Load in a distill job, whose reference is the teacher loaded from "
          "distill.teacher");
    }
    // The reference's weights are a file the run wrote in its run
    // directory (Driver::TakeReference; over gRPC a path confined to it):
    // neither a symbolic link nor a second hard link to a file elsewhere.
    if (absl::Status s = env::CheckRegularFile(weights_path, env::Links::kRunFile); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("reference weights: ", s.message()));
    }
    const ledger::PeakWindow window;
    absl::StatusOr<model::Transformer> model =
        LoadFrozen(config_, tokenizer_->vocab_size(), model::Head::kLanguageModel, device_,
                   weights_path, "reference weights");
    if (!model.ok()) return model.status();
    // Taken before any adapter trained, a LoRA run's reference is the
    // learner's frozen base: it reads that, and its own copy is freed.
    int64_t shared = 0;
    if (shared_base_ != nullptr && shared_base_->IsBase((*model)->NamedWeights())) {
      absl::StatusOr<int64_t> attached = shared_base_->Attach(*model);
      if (!attached.ok()) return attached.status();
      shared = *attached;
    }
    return Install(*std::move(model), shared, window);
  }

  absl::StatusOr<v1::ScoreResponse> Scores(const v1::LogProbRequest& request) override {
    if (reward_model_.is_empty()) {
      return absl::FailedPreconditionError(
          "reference: Scores without a reward model (the job's ppo.reward is not "
          "reward_model)");
    }
    absl::StatusOr<model::TokenBatch> batch = Batch(request);
    if (!batch.ok()) return batch.status();
    v1::ScoreResponse response;
    if (request.samples_size() == 0) return response;
    torch::NoGradGuard no_grad;
    Move(reward_model_, reward_offload_, ledger::Object::kRewardModel, ledger::MoveDirection::kIn,
         ledger::Stage::kReward);
    absl::Cleanup out = [this] {
      Move(reward_model_, reward_offload_, ledger::Object::kRewardModel,
           ledger::MoveDirection::kOut, ledger::Stage::kReward);
    };
    // Opened after the weights came in: its peak beyond the start is scratch.
    const ledger::PeakWindow window;
    const torch::Tensor scores = model::SequenceScores(reward_model_, *batch).contiguous();
    RecordWorkspace(window, 0, ledger::Stage::kReward);
    response.set_forward_flops(Flops(*batch));
    response.mutable_scores()->Add(scores.data_ptr<float>(),
                                   scores.data_ptr<float>() + scores.numel());
    return response;
  }

  absl::StatusOr<v1::LogProbResponse> LogProbs(
      const v1::LogProbRequest& request) override {
    if (model_.is_empty()) {
      return absl::FailedPreconditionError("reference: LogProbs before Load");
    }
    v1::LogProbResponse response;
    if (request.samples_size() == 0) return response;
    // Length-bucketed passes (model::LengthOrder): each pads to its own
    // rows' longest sequence, not the request's.
    const std::vector<model::SequencePair> pairs = Pairs(request);
    const std::vector<int64_t> order = model::LengthOrder(pairs);
    for (int64_t i = 0; i < request.samples_size(); ++i) response.add_sequences();
    torch::NoGradGuard no_grad;
    Move(model_, model_offload_, ledger::Object::kReferenceModel, ledger::MoveDirection::kIn,
         ledger::Stage::kReference);
    absl::Cleanup out = [this] {
      Move(model_, model_offload_, ledger::Object::kReferenceModel, ledger::MoveDirection::kOut,
           ledger::Stage::kReference);
    };
    const ledger::PeakWindow window;
    for (size_t begin = 0; begin < order.size(); begin += kRowsPerPass) {
      const size_t end = std::min(order.size(), begin + kRowsPerPass);
      const absl::Span<const int64_t> ids = absl::MakeConstSpan(order).subspan(begin, end - begin);
      std::vector<model::SequencePair> slice;
      for (const int64_t i : ids) slice.push_back(pairs[i]);
      absl::StatusOr<model::TokenBatch> batch = MakeBatch(slice, ids);
      if (!batch.ok()) return batch.status();
      const torch::Tensor logp = model::TargetLogProbs(*decoder_, *batch, temperature_);
      response.set_forward_flops(response.forward_flops() + Flops(*batch));
      for (size_t k = 0; k < ids.size(); ++k) {
        std::vector<float> row = model::RowResponseValues(logp, *batch, static_cast<int64_t>(k));
        response.mutable_sequences(static_cast<int>(ids[k]))
            ->mutable_logprobs()
            ->Add(row.begin(), row.end());
      }
    }
    RecordWorkspace(window, 0, ledger::Stage::kReference);
    return response;
  }

 private:
  // The distill teacher from distill.teacher's init_checkpoint, else its
  // path, once at build.
  absl::Status LoadTeacher() {
    const bool from_init = !config_.init_checkpoint().empty();
    const ledger::PeakWindow window;
    absl::StatusOr<model::Transformer> model =
        LoadFrozen(config_, tokenizer_->vocab_size(), model::Head::kLanguageModel, device_,
                   from_init ? config_.init_checkpoint() : config_.path(),
                   from_init ? "distill.teacher.init_checkpoint" : "distill.teacher.path");
    if (!model.ok()) return model.status();
    return Install(*std::move(model), 0, window);
  }

  // `model` as the reference from now on, `shared` of its bytes read from
  // the learner's base; its bytes and the load's scratch (seen by `window`)
  // in the ledger, then out to the host under offload_. With
  // tensor_parallel_ > 1 the log-probs run on a group of that many ranks
  // holding its slices (model/tensor_parallel.h); fails, changing nothing,
  // when the model does not split.
  absl::Status Install(model::Transformer model, int64_t shared,
                       const ledger::PeakWindow& window) {
    std::unique_ptr<model::Decoder> decoder;
    if (tensor_parallel_ > 1) {
      absl::StatusOr<std::unique_ptr<model::TensorParallelModel>> group =
          model::TensorParallelModel::Split(*model, tensor_parallel_);
      if (!group.ok()) {
        return absl::Status(group.status().code(),
                            absl::StrCat("reference: ", group.status().message()));
      }
      if (!rank_devices_.empty()) {
        if (absl::Status s = (*group)->PlaceRanks(rank_devices_); !s.ok()) {
          return absl::Status(s.code(), absl::StrCat("reference: ", s.message()));
        }
      }
      decoder = *std::move(group);
    } else {
      decoder = std::make_unique<model::TransformerDecoder>(*model);
    }
    decoder_ = std::move(decoder);
    if (ledger_ != nullptr) {
      ledger_->RecordObject(id_, ledger::Object::kReferenceModel, ParameterBytes(model) - shared,
                            ledger::Stage::kLoad);
      // The file's tensors, copied into the model and freed.
      RecordWorkspace(window, ParameterBytes(model), ledger::Stage::kLoad);
    }
    model_ = std::move(model);
    // A new model: the old one's host copies go with it.
    model_offload_ = model::HostOffload();
    Move(model_, model_offload_, ledger::Object::kReferenceModel, ledger::MoveDirection::kOut,
         ledger::Stage::kLoad);
    return absl::OkStatus();
  }

  // memory.offload_frozen or the colocated placement: `model`'s weights in
  // from host memory for one use, or out after it (otherwise nothing); the
  // move and the object's device bytes (0 while out) in the ledger.
  void Move(model::Transformer& model, model::HostOffload& offload, ledger::Object object,
            ledger::MoveDirection direction, ledger::Stage stage) {
    if (!offload_) return;
    const model::MoveResult moved = direction == ledger::MoveDirection::kOut
                                        ? offload.MoveOut(model->parameters())
                                        : offload.MoveIn();
    if (ledger_ == nullptr || moved.tensors == 0) return;
    ledger_->RecordMove(id_, object, direction, moved.bytes, moved.seconds, stage);
    ledger_->RecordObject(id_, object, direction == ledger::MoveDirection::kOut ? 0 : moved.bytes,
                          stage);
  }

  // The scratch of a call at its peak (what `window` saw beyond its start and
  // the `kept` bytes that outlive the call), recorded and then freed.
  void RecordWorkspace(const ledger::PeakWindow& window, int64_t kept, ledger::Stage stage) {
    if (ledger_ == nullptr) return;
    const int64_t bytes =
        std::max<int64_t>(0, window.peak_bytes() - window.start_live_bytes() - kept);
    ledger_->RecordObject(id_, ledger::Object::kWorkspace, bytes, stage);
    ledger_->RecordObject(id_, ledger::Object::kWorkspace, 0, stage);
  }

  // The forward's useful arithmetic: its live tokens (config/flops.h).
  double Flops(const model::TokenBatch& batch) const {
    return config::ForwardFlops(config_, tokenizer_->vocab_size(), model::LiveLengths(batch));
  }

  // The request's samples as one batch (an empty request gives an empty,
  // unused batch).
  absl::StatusOr<model::TokenBatch> Batch(const v1::LogProbRequest& request) const {
    return MakeBatch(Pairs(request), {});
  }

  static std::vector<model::SequencePair> Pairs(const v1::LogProbRequest& request) {
    std::vector<model::SequencePair> pairs;
    pairs.reserve(request.samples_size());
    for (const auto& s : request.samples()) {
      pairs.push_back({s.prompt_tokens(), s.response_tokens()});
    }
    return pairs;
  }

  // `pairs` as one batch; an error names the row by `row_ids` (the rows'
  // places in the request) when given.
  absl::StatusOr<model::TokenBatch> MakeBatch(absl::Span<const model::SequencePair> pairs,
                                              absl::Span<const int64_t> row_ids) const {
    absl::StatusOr<model::TokenBatch> batch =
        model::MakeTokenBatch(pairs, tokenizer_->pad_id(), config_.max_seq_len(), row_ids);
    if (!batch.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("reference: ", batch.status().message()));
    }
    return batch;
  }

  // Rows per length-bucketed LogProbs pass (the learner's default
  // micro-batch, grpo.micro_batch_size).
  static constexpr size_t kRowsPerPass = 64;

  const std::string id_;
  const torch::Device device_;
  // Where each rank of a tensor-parallel group computes; empty: on device_.
  const std::vector<torch::Device> rank_devices_;
  // The reference is the distill teacher (config::ReferenceIsTeacher).
  const bool teacher_;
  // The reference's shape (config::ReferenceModel).
  const v1::ModelConfig config_;
  const text::Tokenizer* tokenizer_;
  const double temperature_;
  const bool offload_;
  // deployment.reference.tensor_parallel.
  const int tensor_parallel_;
  ledger::Ledger* ledger_;
  // Null when nothing is shared or the weights move (offload_).
  const std::shared_ptr<const model::SharedBase> shared_base_;
  model::Transformer model_{nullptr};
  // What LogProbs runs: model_, or a tensor-parallel group of its slices.
  std::unique_ptr<model::Decoder> decoder_;
  model::Transformer reward_model_{nullptr};
  model::HostOffload model_offload_;
  model::HostOffload reward_offload_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ReferenceWorker>> NewLocalReference(
    const v1::JobConfig& job, const text::Tokenizer* tokenizer, ledger::Ledger* ledger,
    const model::Device& device, std::shared_ptr<const model::SharedBase> shared_base,
    const std::vector<model::Device>& rank_devices) {
  // The job's one reference worker (deployment.reference.count is 1).
  const std::string id = config::WorkerId(v1::REFERENCE).ToString();
  auto reference = std::make_unique<LocalReference>(job, tokenizer, ledger, id, device,
                                                    std::move(shared_base), rank_devices);
  absl::Status init = model::TorchEdge(id).Call("build", [&] { return reference->Init(job); });
  if (!init.ok()) return init;
  return GuardTorchErrors(std::move(reference), id);
}

}  // namespace trellis::reference
