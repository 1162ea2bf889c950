#ifndef TRELLIS_MODEL_TOKEN_BATCH_H_
#define TRELLIS_MODEL_TOKEN_BATCH_H_

// Teacher-forced batches of (prompt, response) token sequences, and the
// per-token log-probs of the responses under a model. The learner and the
// reference score responses through this one path, so their log-probs agree
// with each other and with the actor's sampling log-probs.

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/decoder.h"
#include "model/transformer.h"

namespace trellis::model {

struct SequencePair {
  absl::Span<const int32_t> prompt;
  absl::Span<const int32_t> response;
  // Per response token, whether it is a target the loss trains (a
  // multi-turn sample's environment tokens are not); empty: every one.
  absl::Span<const bool> trained = {};
};

// Right-padded inputs and targets: row i holds prompt+response shifted by
// one. Response tokens are the targets whose mask is 1. A batch lives on the
// host; the functions below run the model on its own device (a CUDA one
// too) and return their [B, T] or [B] results on the host, differentiable
// back through the copy.
struct TokenBatch {
  torch::Tensor inputs;         // [B, T] int64
  torch::Tensor targets;        // [B, T] int64
  torch::Tensor response_mask;  // [B, T] float32, 1 on response targets
  // Response tokens per row, in order, as positions into `targets`:
  // row i's response starts at column response_start[i].
  std::vector<int64_t> response_start;
  std::vector<int64_t> response_length;
};

// Each row's live (non-pad) input length: its prompt and response less the
// last token, which predicts nothing.
std::vector<int64_t> LiveLengths(const TokenBatch& batch);

// REQUIRES: every prompt is non-empty. Response targets a pair marks
// untrained are left out of the mask. Fails with InvalidArgument when a
// sequence exceeds `max_len` tokens or its trained flags do not match its
// response, naming the row: its index in `pairs`,
// or row_ids[index] when given (the row's place in a larger request).
[[nodiscard]] absl::StatusOr<TokenBatch> MakeTokenBatch(absl::Span<const SequencePair> pairs,
                                                        int32_t pad_id, int64_t max_len,
                                                        absl::Span<const int64_t> row_ids = {});

// Length-bucketed batching: the indices of `pairs` sorted by prompt +
// response length (stable), so that consecutive slices of the order (the
// learner's micro-batches, the reference's passes) hold sequences of like
// length and each TokenBatch pads to little more than its own rows.
std::vector<int64_t> LengthOrder(absl::Span<const SequencePair> pairs);

// log softmax(logits / temperature) at each target: [B, T] float32, with
// zeros where response_mask is 0. Differentiable. When `argmax_hits` is
// given it receives a [B, T] bool tensor: the target is the model's argmax.
// `routing` (a mixture-of-experts model's; nullptr: none) is the forward's
// (model/transformer.h ExpertRouting).
torch::Tensor TargetLogProbs(Transformer& model, const TokenBatch& batch,
                             double temperature = 1.0,
                             torch::Tensor* argmax_hits = nullptr,
                             ExpertRouting* routing = nullptr);
// The same through a Decoder (one Transformer, or a tensor-parallel group:
// model/tensor_parallel.h).
torch::Tensor TargetLogProbs(Decoder& model, const TokenBatch& batch, double temperature = 1.0,
                             torch::Tensor* argmax_hits = nullptr,
                             ExpertRouting* routing = nullptr);
// The same from logits [B, T, vocab] already computed for `batch` (a
// shared trunk that also feeds a value head).
torch::Tensor TargetLogProbsFromLogits(torch::Tensor logits, const TokenBatch& batch,
                                       double temperature = 1.0,
                                       torch::Tensor* argmax_hits = nullptr);

// A scalar-head model's (Head::kScalar) value of the state before each
// response token: [B, T] float32 laid out as TargetLogProbs (the value at
// a response target's column is the head's output at the input that
// predicts it), zeros where response_mask is 0. Differentiable. A critic.
torch::Tensor ResponseValues(Transformer& model, const TokenBatch& batch);

// A scalar-head model's score of each whole sequence (prompt + response):
// the head's output after the last response token, [B] float32.
// Differentiable. A reward model.
torch::Tensor SequenceScores(Transformer& model, const TokenBatch& batch);

// Row i's response log-probs (length response_length[i]) from a [B, T]
// tensor laid out as TargetLogProbs returns it.
std::vector<float> RowResponseValues(const torch::Tensor& values,
                                     const TokenBatch& batch, int64_t row);

// The inverse: a [B, T] float32 tensor with per-row response values placed
// at the response columns (zeros elsewhere).
torch::Tensor PlaceResponseValues(
    const std::vector<absl::Span<const float>>& rows, const TokenBatch& batch);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_TOKEN_BATCH_H_
