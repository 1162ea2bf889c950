#include "actor/internal/actor_model.h"

#include <torch/torch.h>

#include <mutex>
#include <utility>
#include <vector>

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
  auto* sliced = dynamic_cast<weightsync::SliceReceiver*>(receiver);
  // Under the resharding sync a group computes only on its ranks: the
  // whole model is split on the host and its weights freed there, so that
  // no device ever holds all of it.
  const bool split_on_host = options.tensor_parallel > 1 && sliced != nullptr;
  const torch::Device device = model::TorchDevice(options.device);
  if (!split_on_host) built.policy->to(device);
  if (options.lora.rank() > 0 && options.shared_base != nullptr && !options.colocated) {
    absl::StatusOr<int64_t> attached = options.shared_base->Attach(built.policy);
    if (!attached.ok()) return attached.status();
    built.shared_bytes = *attached;
  }
  if (options.tensor_parallel > 1) {
    absl::StatusOr<std::unique_ptr<model::TensorParallelModel>> group =
        model::TensorParallelModel::Split(*built.policy, options.tensor_parallel, options.lora);
    if (!group.ok()) return group.status();
    std::vector<torch::Device> ranks = model::TorchDevices(options.rank_devices);
    if (ranks.empty()) ranks.assign(options.tensor_parallel, device);
    if (absl::Status s = (*group)->PlaceRanks(ranks); !s.ok()) return s;
    built.parallel = *std::move(group);
  }
  if (sliced != nullptr) {
    absl::StatusOr<weightsync::NamedTensors> slices =
        BindSlices(*sliced, *built.policy, built.parallel.get());
    if (!slices.ok()) return slices.status();
    built.slices = *std::move(slices);
  }
  if (split_on_host) built.policy->to(device);  // Its buffers; its weights are freed.
  return built;
}

}  // namespace trellis::actor::internal
