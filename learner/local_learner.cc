// The local learner (learner/internal/local_learner.h): each LearnerWorker
// call builds the job's objective for its batch and hands it to the update
// engine; weights are published from the models.

#include "learner/local_learner.h"

#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/flops.h"
#include "config/recipe.h"
#include "learner/internal/data_parallel.h"
#include "learner/internal/local_learner.h"
#include "model/safetensors_dtypes.h"
#include "model/shared_base.h"
#include "model/torch_device.h"
#include "weightsync/fingerprint.h"
#include "weightsync/reshard_ends.h"

namespace trellis::learner {
namespace internal {

LocalLearner::LocalLearner(const v1::JobConfig& job, const LocalLearnerOptions& options,
                           weightsync::Publisher* transport, ledger::Ledger* ledger)
    : job_(job), options_(options), transport_(transport), ledger_(ledger) {}

absl::Status LocalLearner::Init() {
  absl::StatusOr<std::unique_ptr<LearnerModels>> models =
      LearnerModels::Build(job_, options_.vocab_size, options_.seed, options_.worker_id,
                           model::TorchDevice(options_.device));
  if (!models.ok()) return models.status();
  models_ = *std::move(models);
  if (options_.shared_base != nullptr && models_->policy()->has_adapters() &&
      models_->masters() == nullptr) {
    options_.shared_base->Hold(models_->policy());
  }
  GroupOptions group;
  group.member = options_.group;
  group.timeout = absl::Milliseconds(job_.deployment().call_timeout_ms());
  group.bucket_bytes = job_.deployment().bucket_bytes();
  group.worker_id = options_.worker_id;
  group.device = model::TorchDevice(options_.device);
  absl::StatusOr<std::unique_ptr<DataParallelGroup>> joined = DataParallelGroup::Join(group);
  if (!joined.ok()) return joined.status();
  engine_ = std::make_unique<UpdateEngine>(job_, options_.worker_id, models_.get(),
                                           *std::move(joined), ledger_);
  if (absl::Status s = engine_->ShardParameters(); !s.ok()) return s;
  if (auto* shards = dynamic_cast<weightsync::ShardPublisher*>(transport_); shards != nullptr) {
    // The job's weight sync reshards: this rank serves its own shards.
    if (engine_->flat() == nullptr || models_->policy()->has_adapters()) {
      return absl::FailedPreconditionError(absl::StrCat(
          options_.worker_id, ": the weight sync reshards flat shards, which this learner "
          "holds only under memory.zero_stage 2 or 3 without LoRA"));
    }
    if (absl::Status s = shards->Bind(engine_->flat()->layouts()); !s.ok()) return s;
  }
  return RegisterBuiltinObjectives(objectives_);
}

absl::StatusOr<std::unique_ptr<Objective>> LocalLearner::NewObjective(BatchRef batch) {
  ObjectiveInput input;
  input.job = &job_;
  input.models = models_.get();
  input.worker_id = options_.worker_id;
  input.pad_id = options_.pad_id;
  input.batch = batch;
  return objectives_.New(config::RecipeOf(job_), input);
}

namespace {

// Each row's live (non-pad) input length: its prompt and response less the
// last token, which predicts nothing (model/token_batch.h); a preference
// pair is two rows.
std::vector<int64_t> LiveLengths(const BatchRef& batch) {
  std::vector<int64_t> lengths;
  const auto row = [&lengths](int prompt, int response) {
    lengths.push_back(prompt + response - 1);
  };
  if (const auto* sft = std::get_if<const v1::SftBatch*>(&batch)) {
    for (const auto& p : (*sft)->pairs()) row(p.prompt_tokens_size(), p.target_tokens_size());
  } else if (const auto* train = std::get_if<const v1::TrainBatch*>(&batch)) {
    for (const auto& s : (*train)->samples()) {
      row(s.prompt_tokens_size(), s.response_tokens_size());
    }
  } else {
    for (const auto& p : std::get<const v1::PreferenceBatch*>(batch)->pairs()) {
      row(p.prompt_tokens_size(), p.chosen_tokens_size());
      row(p.prompt_tokens_size(), p.rejected_tokens_size());
    }
  }
  return lengths;
}

}  // namespace

absl::StatusOr<v1::TrainStats> LocalLearner::Train(BatchRef batch) {
  absl::StatusOr<std::unique_ptr<Objective>> objective = NewObjective(batch);
  if (!objective.ok()) return objective.status();
  absl::StatusOr<v1::TrainStats> stats = engine_->Step(**objective);
  // The whole batch's arithmetic, once: rank 0 reports it for the group.
  if (stats.ok() && engine_->group().rank() == 0) {
    stats->set_flops(config::TrainFlops(job_.model(), options_.vocab_size, LiveLengths(batch)));
  }
  return stats;
}

absl::StatusOr<v1::TrainStats> LocalLearner::Evaluate(BatchRef batch) {
  absl::StatusOr<std::unique_ptr<Objective>> objective = NewObjective(batch);
  if (!objective.ok()) return objective.status();
  return engine_->Measure(**objective);
}

absl::StatusOr<v1::TrainStats> LocalLearner::SftStep(const v1::SftBatch& batch) {
  return Train(&batch);
}

absl::StatusOr<v1::TrainStats> LocalLearner::TrainStep(const v1::TrainBatch& batch) {
  return Train(&batch);
}

absl::StatusOr<v1::TrainStats> LocalLearner::PreferenceStep(const v1::PreferenceBatch& batch) {
  return Train(&batch);
}

absl::StatusOr<v1::TrainStats> LocalLearner::EvalSft(const v1::SftBatch& batch) {
  return Evaluate(&batch);
}

absl::StatusOr<v1::TrainStats> LocalLearner::EvalPreference(const v1::PreferenceBatch& batch) {
  return Evaluate(&batch);
}

absl::Status LocalLearner::ForEachGathered(
    const std::function<absl::Status(const std::string&, const torch::Tensor&)>& fn) {
  const model::Transformer& policy = models_->policy();
  return engine_->flat()->ForEachUnit([&](const model::NamedTensors& unit) {
    // LoRA: a block's weights merged with its adapters, read while the
    // block is gathered.
    constexpr std::string_view kBlocks = "model.layers.";
    const std::string& first = unit.front().first;
    std::map<std::string, torch::Tensor> merged;
    if (policy->has_adapters() && first.rfind(kBlocks, 0) == 0) {
      for (auto& [name, tensor] : policy->MergedWeights(
               first.substr(0, first.find('.', kBlocks.size()) + 1))) {
        merged[name] = std::move(tensor);
      }
    }
    for (const auto& [name, tensor] : unit) {
      auto it = merged.find(name);
      if (absl::Status s = fn(name, it != merged.end() ? it->second : tensor); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<v1::WeightSyncStats> LocalLearner::PublishWeights() {
  // A resharding sync: every rank publishes its own shards, nothing
  // gathered.
  if (auto* shards = dynamic_cast<weightsync::ShardPublisher*>(transport_); shards != nullptr) {
    absl::StatusOr<v1::WeightSyncStats> sent =
        shards->PublishShards(engine_->version(), engine_->flat()->shards());
    if (sent.ok() && ledger_ != nullptr) {
      ledger_->RecordObject(options_.worker_id, ledger::Object::kCommunication,
                            shards->StagedBytes(), ledger::Stage::kWeightSync);
    }
    return sent;
  }
  // Flat shards: every rank gathers each unit in turn (a collective);
  // rank 0 keeps the copy it publishes.
  const bool gathers = engine_->flat() != nullptr && !models_->policy()->has_adapters();
  if (engine_->flat() != nullptr && engine_->group().rank() != 0) {
    if (gathers) {
      absl::Status s = ForEachGathered([](const std::string&, const torch::Tensor&) {
        return absl::OkStatus();
      });
      if (!s.ok()) return s;
    }
    return v1::WeightSyncStats();
  }
  if (transport_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(options_.worker_id, ": no weight transport (rank ", engine_->group().rank(),
                     " of ", engine_->group().size(), " learners; rank 0 publishes)"));
  }
  // Under LoRA only the adapters change, and actors build the same base:
  // they get the adapters and the base's fingerprint, to refuse adapters
  // trained on another base.
  model::NamedTensors sent;
  if (gathers) {
    absl::Status s = ForEachGathered([&sent](const std::string& name, const torch::Tensor& t) {
      sent.emplace_back(name, t.clone());
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
  } else {
    sent = models_->TrainedWeights();
  }
  if (models_->masters() != nullptr) {
    // Actors sample in float32: they get the bf16 weights the learner
    // computes with, widened.
    for (auto& [name, tensor] : sent) tensor = tensor.detach().to(torch::kFloat32);
  }
  if (models_->policy()->has_adapters()) {
    sent.emplace_back(weightsync::kBaseFingerprint,
                      weightsync::FingerprintTensor(models_->base_fingerprint()));
  }
  return transport_->Publish(engine_->version(), sent);
}

absl::Status LocalLearner::SaveWeights(const std::string& path) {
  // Plain Llama weights (adapters merged) that load without LoRA. Flat
  // shards: gathered unit by unit; rank 0 writes them.
  if (engine_->flat() == nullptr) return SaveNamed(path, models_->policy()->MergedWeights());
  // Each tensor written as its unit is gathered, in the units' order.
  std::unique_ptr<model::SafetensorsWriter> writer;
  if (engine_->group().rank() == 0) {
    std::vector<model::TensorSpec> specs;
    for (const model::FlatUnit& unit : engine_->flat()->layouts()) {
      const torch::ScalarType dtype = *model::SafetensorsDtypeOf(unit.dtype);
      for (const model::FlatEntry& e : unit.entries) specs.push_back({e.name, dtype, e.shape});
    }
    absl::StatusOr<std::unique_ptr<model::SafetensorsWriter>> opened =
        model::SafetensorsWriter::Open(path, specs,
                                       {{"policy_version", absl::StrCat(engine_->version())}});
    if (!opened.ok()) return opened.status();
    writer = *std::move(opened);
  }
  absl::Status s = ForEachGathered([&writer](const std::string&, const torch::Tensor& t) {
    return writer != nullptr ? writer->Append(t) : absl::OkStatus();
  });
  if (!s.ok()) return s;
  return writer != nullptr ? writer->Finish() : absl::OkStatus();
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
