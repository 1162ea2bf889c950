#ifndef TRELLIS_LOOP_LOOP_UTIL_H_
#define TRELLIS_LOOP_LOOP_UTIL_H_

// Pieces the driver and the recipes share: error context, per-step seeds,
// prompts and supervised pairs as the model reads them, and what an update
// reports.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"
#include "ledger/ledger.h"
#include "text/tokenizer.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::loop {

// `status` with its message prefixed by "where: " (OK stays OK).
absl::Status At(const absl::Status& status, absl::string_view where);

// SplitMix64: a well-spread seed from the job seed and a salt (a step).
uint64_t MixSeed(uint64_t seed, uint64_t salt);

// The example's prompt as the model reads it: BOS, then the prompt's
// tokens; id, text and answer copied. Fails naming the example.
[[nodiscard]] absl::StatusOr<v1::Prompt> MakePrompt(const text::Tokenizer& tokenizer,
                                                    const data::Example& example);

// A response's tokens as the model produces them: the text's tokens, then
// EOS. Fails naming `what` (e.g. "answer of example 3").
[[nodiscard]] absl::StatusOr<std::vector<int32_t>> ResponseTokens(const text::Tokenizer& tokenizer,
                                                                  const std::string& text,
                                                                  const std::string& what);

// A supervised pair: the prompt (MakePrompt) and the answer's response
// tokens.
[[nodiscard]] absl::StatusOr<v1::SftBatch::Pair> MakeSftPair(const text::Tokenizer& tokenizer,
                                                             const data::Example& example);

// What a learner update reports that every loop records: tokens, loss, KL,
// clipping, gradient norm, value and preference stats, and the memory
// strategies' costs (recompute, communication). The loop sets accuracy.
void RecordUpdate(const v1::TrainStats& stats, ledger::StepCounts* counts);

// The sum of a response's per-token log-probs.
double SumLogProbs(const google::protobuf::RepeatedField<float>& logprobs);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_LOOP_UTIL_H_
