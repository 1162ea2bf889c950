#include "actor/torch_guard.h"

#include <utility>

#include "model/torch_status.h"

namespace trellis::actor {
namespace {

class TorchGuardedActor final : public RolloutWorker {
 public:
  TorchGuardedActor(std::unique_ptr<RolloutWorker> inner, std::string worker_id)
      : inner_(std::move(inner)), edge_(std::move(worker_id)) {}

  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request) override {
    return edge_.Call("Generate", [&] { return inner_->Generate(request); });
  }
  absl::StatusOr<v1::GenerateResponse> GenerateStreaming(const v1::GenerateRequest& request,
                                                         const PartSink& on_part) override {
    return edge_.Call("Generate", [&] { return inner_->GenerateStreaming(request, on_part); });
  }
  absl::StatusOr<v1::GenerateResponse> GenerateUntil(const v1::GenerateRequest& request,
                                                     const StopFn& stop) override {
    return edge_.Call("Generate", [&] { return inner_->GenerateUntil(request, stop); });
  }
  absl::StatusOr<v1::WeightSyncStats> SyncWeights(int64_t version) override {
    return edge_.Call("SyncWeights", [&] { return inner_->SyncWeights(version); });
  }
  int64_t policy_version() const override { return inner_->policy_version(); }

 private:
  const std::unique_ptr<RolloutWorker> inner_;
  const model::TorchEdge edge_;
};

}  // namespace

std::unique_ptr<RolloutWorker> GuardTorchErrors(std::unique_ptr<RolloutWorker> inner,
                                                std::string worker_id) {
  return std::make_unique<TorchGuardedActor>(std::move(inner), std::move(worker_id));
}

}  // namespace trellis::actor
