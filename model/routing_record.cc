#include "model/routing_record.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace trellis::model {

RoutingShape RoutingShapeOf(const v1::ModelConfig& config) {
  return {config.n_layers(), config.experts_per_token(), config.num_experts()};
}

void AppendRouting(const torch::Tensor& chosen, std::string* bytes) {
  const torch::Tensor flat = chosen.to(torch::kCPU, torch::kUInt8).contiguous();
  const auto* data = reinterpret_cast<const char*>(flat.data_ptr<uint8_t>());
  bytes->append(data, static_cast<size_t>(flat.numel()));
}

v1::ExpertRouting MakeRouting(const RoutingShape& shape, std::string bytes) {
  v1::ExpertRouting record;
  record.set_layers(static_cast<int32_t>(shape.layers));
  record.set_top_k(static_cast<int32_t>(shape.top_k));
  record.set_experts(std::move(bytes));
  return record;
}

absl::Status CheckRouting(const v1::ExpertRouting& record, const RoutingShape& shape,
                          int64_t positions, absl::string_view what) {
  if (record.layers() != shape.layers || record.top_k() != shape.top_k) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": routing record of ", record.layers(), " layers x top-",
                     record.top_k(), ", the model routes ", shape.layers, " layers x top-",
                     shape.top_k, " (was it recorded by this model?)"));
  }
  const int64_t expected = positions * shape.bytes_per_position();
  if (static_cast<int64_t>(record.experts().size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": routing record of ", record.experts().size(), " bytes, expected ", expected,
        " (", positions, " positions x ", shape.layers, " layers x top-", shape.top_k, ")"));
  }
  for (size_t i = 0; i < record.experts().size(); ++i) {
    const auto expert = static_cast<uint8_t>(record.experts()[i]);
    if (expert >= shape.num_experts) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": routing record names expert ",
                                                     expert, " at byte ", i, "; the model has ",
                                                     shape.num_experts));
    }
  }
  return absl::OkStatus();
}

torch::Tensor PlaceRouting(absl::Span<const v1::ExpertRouting* const> records,
                           const TokenBatch& batch, const RoutingShape& shape) {
  const int64_t rows = batch.inputs.size(0), columns = batch.inputs.size(1);
  torch::Tensor placed = torch::arange(shape.top_k, torch::kInt64)
                             .view({1, 1, 1, shape.top_k})
                             .expand({rows, columns, shape.layers, shape.top_k})
                             .contiguous();
  const std::vector<int64_t> live = LiveLengths(batch);
  for (int64_t i = 0; i < rows; ++i) {
    const std::string& bytes = records[i]->experts();
    const torch::Tensor row =
        torch::from_blob(const_cast<char*>(bytes.data()),
                         {live[i], shape.layers, shape.top_k}, torch::kUInt8);
    placed[i].narrow(0, 0, live[i]).copy_(row);
  }
  return placed;
}

RoutingAgreement CompareRouting(const torch::Tensor& own, const torch::Tensor& replayed,
                                const TokenBatch& batch) {
  // A set of experts is its sorted list.
  const torch::Tensor a = std::get<0>(own.to(torch::kCPU, torch::kInt64).sort(-1));
  const torch::Tensor b = std::get<0>(replayed.to(torch::kCPU, torch::kInt64).sort(-1));
  const torch::Tensor differs = (a != b).any(-1).any(-1);  // [B, T]: in any layer
  RoutingAgreement agreement;
  const std::vector<int64_t> live = LiveLengths(batch);
  for (size_t i = 0; i < live.size(); ++i) {
    agreement.differing += differs[i].narrow(0, 0, live[i]).sum().item<int64_t>();
    agreement.compared += live[i];
  }
  return agreement;
}

}  // namespace trellis::model
