#include "actor/internal/actor_model.h"

#include <torch/torch.h>

#include <mutex>
#include <utility>

#include "model/flat_layout.h"
#include "model/policy.h"
#include "model/shared_base.h"
#include "model/torch_device.h"
#include "weightsync/reshard_ends.h"

namespace trellis::actor::internal {
namespace {

// Binds `receiver` to `whole`'s layout; with a group, the ranks' tensors
// (ActorModel::slices) and `whole`'s weights freed.
absl::StatusOr<weightsync::NamedTensors> BindSlices(weightsync::SliceReceiver& receiver,
                                                    model::TransformerImpl& whole,
                                                    model::TensorParallelModel* parallel) {
  if (absl::Status s =
          receiver.Bind(model::FlatUnitsOf(whole.NamedWeights(), receiver.learner_ranks()));
      !s.ok()) {
    return s;
  }
  weightsync::NamedTensors slices;
  if (parallel == nullptr) return slices;
  for (int k = 0; k < parallel->k(); ++k) {
    for (auto& [name, t] : parallel->rank(k).NamedWeights()) {
      slices.emplace_back(weightsync::RankTensorName(k, name), t);
    }
  }
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : whole.parameters()) p.set_data(torch::empty({0}, p.options()));
  return slices;
}

}  // namespace

absl::StatusOr<ActorModel> BuildActorModel(const v1::ModelConfig& config, int64_t vocab_size,
                                           const LocalActorOptions& options,
                                           weightsync::Receiver* receiver) {
  ActorModel built;
  if (options.lora.rank() > 0) {
    absl::StatusOr<model::Transformer> policy =
        model::NewPolicy(config, options.lora, vocab_size, options.seed);
    if (!policy.ok()) return policy.status();
    built.policy = *std::move(policy);
  } else {
    const std::unique_lock<std::recursive_mutex> draws = model::LockInitialDraws();
    built.policy = model::Transformer(config, vocab_size);
  }
  built.policy->to(model::TorchDevice(options.device));
  if (options.lora.rank() > 0 && options.shared_base != nullptr && !options.colocated) {
    absl::StatusOr<int64_t> attached = options.shared_base->Attach(built.policy);
    if (!attached.ok()) return attached.status();
    built.shared_bytes = *attached;
  }
  if (options.tensor_parallel > 1) {
    absl::StatusOr<std::unique_ptr<model::TensorParallelModel>> group =
        model::TensorParallelModel::Split(*built.policy, options.tensor_parallel, options.lora);
    if (!group.ok()) return group.status();
    if (!options.rank_devices.empty()) {
      if (absl::Status s = (*group)->PlaceRanks(model::TorchDevices(options.rank_devices));
          !s.ok()) {
        return s;
      }
    }
    built.parallel = *std::move(group);
  }
  if (auto* sliced = dynamic_cast<weightsync::SliceReceiver*>(receiver); sliced != nullptr) {
    absl::StatusOr<weightsync::NamedTensors> slices =
        BindSlices(*sliced, *built.policy, built.parallel.get());
    if (!slices.ok()) return slices.status();
    built.slices = *std::move(slices);
  }
  return built;
}

}  // namespace trellis::actor::internal
