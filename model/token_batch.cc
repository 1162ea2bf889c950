#include "model/token_batch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace trellis::model {

absl::StatusOr<TokenBatch> MakeTokenBatch(absl::Span<const SequencePair> pairs,
                                          int32_t pad_id, int64_t max_len,
                                          absl::Span<const int64_t> row_ids) {
  const int64_t rows = static_cast<int64_t>(pairs.size());
  int64_t width = 1;
  for (int64_t i = 0; i < rows; ++i) {
    const auto& p = pairs[i];
    const int64_t row = row_ids.empty() ? i : row_ids[i];
    if (p.prompt.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("token batch row ", row, ": empty prompt"));
    }
    const int64_t len = static_cast<int64_t>(p.prompt.size() + p.response.size());
    if (len > max_len) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token batch row ", row, ": ", len, " tokens (prompt ", p.prompt.size(),
          " + response ", p.response.size(), ") exceed max_seq_len ", max_len));
    }
    if (!p.trained.empty() && p.trained.size() != p.response.size()) {
      return absl::InvalidArgumentError(absl::StrCat("token batch row ", row, ": ",
                                                     p.trained.size(), " trained flags for ",
                                                     p.response.size(), " target tokens"));
    }
    width = std::max(width, len - 1);
  }
  TokenBatch batch;
  batch.inputs = torch::full({rows, width}, pad_id, torch::kInt64);
  batch.targets = torch::full({rows, width}, pad_id, torch::kInt64);
  batch.response_mask = torch::zeros({rows, width}, torch::kFloat32);
  auto in = batch.inputs.accessor<int64_t, 2>();
  auto tg = batch.targets.accessor<int64_t, 2>();
  auto mk = batch.response_mask.accessor<float, 2>();
  batch.response_start.resize(rows);
  batch.response_length.resize(rows);
  for (int64_t i = 0; i < rows; ++i) {
    const auto& p = pairs[i];
    const int64_t np = static_cast<int64_t>(p.prompt.size());
    const int64_t nr = static_cast<int64_t>(p.response.size());
    auto token = [&](int64_t k) -> int64_t {
      return k < np ? p.prompt[k] : p.response[k - np];
    };
    for (int64_t k = 0; k + 1 < np + nr; ++k) {
      in[i][k] = token(k);
      tg[i][k] = token(k + 1);
      if (k + 1 >= np && (p.trained.empty() || p.trained[k + 1 - np])) mk[i][k] = 1.0f;
    }
    batch.response_start[i] = np - 1;
    batch.response_length[i] = nr;
  }
  return batch;
}

torch::Tensor TargetLogProbs(Transformer& model, const TokenBatch& batch,
                             double temperature, torch::Tensor* argmax_hits,
                             ExpertRouting* routing) {
  TransformerDecoder decoder(*model);
  return TargetLogProbs(decoder, batch, temperature, argmax_hits, routing);
}

torch::Tensor TargetLogProbs(Decoder& model, const TokenBatch& batch, double temperature,
                             torch::Tensor* argmax_hits, ExpertRouting* routing) {
  const torch::Tensor positions = torch::arange(batch.inputs.size(1), torch::kLong)
                                      .unsqueeze(0)
                                      .expand_as(batch.inputs);
  return TargetLogProbsFromLogits(
      model.forward(batch.inputs, positions, torch::Tensor(), nullptr, routing), batch,
      temperature, argmax_hits);
}

torch::Tensor TargetLogProbsFromLogits(torch::Tensor logits, const TokenBatch& batch,
                                       double temperature, torch::Tensor* argmax_hits) {
  // The vocabulary's softmax where the logits are; [B, T] back to the host.
  const torch::Tensor targets = batch.targets.to(logits.device());
  if (temperature != 1.0) logits = logits / temperature;
  if (argmax_hits != nullptr) {
    *argmax_hits = (logits.detach().argmax(-1) == targets).to(torch::kCPU);
  }
  torch::Tensor logp = torch::log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  return logp.to(torch::kCPU) * batch.response_mask;
}

torch::Tensor ResponseValues(Transformer& model, const TokenBatch& batch) {
  TORCH_CHECK(model->head() == Head::kScalar, "ResponseValues: the model has no scalar head");
  return model->forward(batch.inputs).squeeze(-1).to(torch::kCPU) * batch.response_mask;
}

torch::Tensor SequenceScores(Transformer& model, const TokenBatch& batch) {
  TORCH_CHECK(model->head() == Head::kScalar, "SequenceScores: the model has no scalar head");
  // inputs lack each row's last token (it is only a target): append a
  // column and put it there, so the head can read the state after it.
  const int64_t rows = batch.inputs.size(0);
  torch::Tensor full = torch::cat({batch.inputs, torch::zeros({rows, 1}, batch.inputs.options())}, 1);
  std::vector<int64_t> ends(rows);
  auto tokens = full.accessor<int64_t, 2>();
  auto targets = batch.targets.accessor<int64_t, 2>();
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t last = batch.response_start[i] + batch.response_length[i] - 1;
    tokens[i][last + 1] = targets[i][last];
    ends[i] = last + 1;
  }
  torch::Tensor scores = model->forward(full).squeeze(-1).to(torch::kCPU);  // [B, T + 1]
  return scores.gather(1, torch::tensor(ends, torch::kLong).unsqueeze(1)).squeeze(1);
}

std::vector<int64_t> LengthOrder(absl::Span<const SequencePair> pairs) {
  std::vector<int64_t> order(pairs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  const auto length = [&pairs](int64_t i) { return pairs[i].prompt.size() + pairs[i].response.size(); };
  std::stable_sort(order.begin(), order.end(),
                   [&length](int64_t a, int64_t b) { return length(a) < length(b); });
  return order;
}

std::vector<int64_t> LiveLengths(const TokenBatch& batch) {
  std::vector<int64_t> lengths(batch.response_start.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    lengths[i] = batch.response_start[i] + batch.response_length[i];
  }
  return lengths;
}

std::vector<float> RowResponseValues(const torch::Tensor& values,
                                     const TokenBatch& batch, int64_t row) {
  torch::Tensor row_values =
      values[row]
          .narrow(0, batch.response_start[row], batch.response_length[row])
          .to(torch::kFloat32)
          .contiguous();
  const float* data = row_values.data_ptr<float>();
  return std::vector<float>(data, data + row_values.numel());
}

torch::Tensor PlaceResponseValues(const std::vector<absl::Span<const float>>& rows,
                                  const TokenBatch& batch) {
  torch::Tensor out = torch::zeros_like(batch.response_mask);
  auto acc = out.accessor<float, 2>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t start = batch.response_start[i];
    const int64_t n = std::min<int64_t>(batch.response_length[i], rows[i].size());
    for (int64_t k = 0; k < n; ++k) acc[i][start + k] = rows[i][k];
  }
  return out;
}

}  // namespace trellis::model
