#include "reference/torch_guard.h"

#include <utility>

#include "model/torch_status.h"

namespace trellis::reference {
namespace {

class TorchGuardedReference final : public ReferenceWorker {
 public:
  TorchGuardedReference(std::unique_ptr<ReferenceWorker> inner, std::string worker_id)
      : inner_(std::move(inner)), edge_(std::move(worker_id)) {}

  absl::StatusOr<v1::LogProbResponse> LogProbs(const v1::LogProbRequest& request) override {
    return edge_.Call("LogProbs", [&] { return inner_->LogProbs(request); });
  }
  absl::Status Load(const std::string& weights_path) override {
    return edge_.Call("Load", [&] { return inner_->Load(weights_path); });
  }
  absl::StatusOr<v1::ScoreResponse> Scores(const v1::LogProbRequest& request) override {
    return edge_.Call("Scores", [&] { return inner_->Scores(request); });
  }

 private:
  const std::unique_ptr<ReferenceWorker> inner_;
  const model::TorchEdge edge_;
};

}  // namespace

std::unique_ptr<ReferenceWorker> GuardTorchErrors(std::unique_ptr<ReferenceWorker> inner,
                                                  std::string worker_id) {
  return std::make_unique<TorchGuardedReference>(std::move(inner), std::move(worker_id));
}

}  // namespace trellis::reference
