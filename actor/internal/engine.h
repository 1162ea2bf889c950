#ifndef TRELLIS_ACTOR_INTERNAL_ENGINE_H_
#define TRELLIS_ACTOR_INTERNAL_ENGINE_H_

// The actor's rollout engine: samples a GenerateRequest's responses with a
// KV cache. Two options, each on by default, change only the arithmetic,
// never the samples (tokens exactly; log-probs within float noise), since
// every row draws from its own stream (actor/internal/row_key.h):
//   - share_prefix: each prompt is prefilled once and its KV cache copied to
//     its responses (off: every response row prefills its prompt).
//   - continuous_batching: a row leaves the decode batch when it ends and a
//     waiting row joins it, its prompt's cache placed beside the others'
//     (no position is computed twice, no finished row is decoded); with
//     decode_token_budget > 0 at most that many rows are decoded per step
//     (off: every row decodes until the longest ends, as one left-padded
//     batch).
// A turn cache (actor/internal/turn_cache.h), when given, goes further
// across calls: a row that ends on a stop sequence leaves its keys and
// values there, and a later prompt that extends that row's sequence (a
// multi-turn episode's next turn) prefills only its new tokens. The samples
// are those of a full prefill: tokens exactly, log-probs within float noise
// (the cached positions were computed in other batch shapes).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actor/internal/turn_cache.h"
#include "model/decoder.h"
#include "model/transformer.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::actor::internal {

struct EngineOptions {
  bool share_prefix = true;
  bool continuous_batching = true;
  // Rows decoded per step under continuous batching; 0: no limit (every
  // row joins at once, and the batch shrinks as rows end). Must be >= 0.
  int64_t decode_token_budget = 0;
  // Mixture-of-experts policies under routing replay: each row records the
  // experts every position it ran was routed to (EngineRow.routing). Not
  // with a turn cache, whose positions were routed by earlier calls.
  bool record_routing = false;
};

struct EngineRow {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  bool ended = false;  // the last token stops sampling
  // 1 + the index of the request's stop sequence (SamplingParams.stop) the
  // tokens end with; 0 when the row did not end on one.
  int32_t stop_index = 0;
  // With record_routing: the experts of each position the model ran for
  // this row (its prompt, then every token fed back), model/routing_record.h
  // layout.
  std::string routing;
  // The request stopped (GenerateRequest.finish_prompts) before the row
  // ended or filled max_new_tokens: its tokens so far.
  bool unfinished = false;
};

// What one stage (the prefill, or decoding) computed. Padding and finished
// rows that were computed count: this is the arithmetic done, not the
// useful part.
struct StageWork {
  int64_t positions = 0;        // token positions run through the model
  int64_t attention_pairs = 0;  // query-key scores (per head and layer)
  int64_t forwards = 0;
  double seconds = 0;  // decoding's includes sampling and batch changes
};

struct EngineResult {
  // Prompt-major: responses_per_prompt rows per prompt, in request order.
  std::vector<EngineRow> rows;
  // Live prompt tokens run through the model (once per prefilled sequence)
  // and response tokens sampled; prompt tokens whose keys and values came
  // from the turn cache instead (not in prefill_tokens).
  int64_t prefill_tokens = 0;
  int64_t reused_tokens = 0;
  int64_t generated_tokens = 0;
  StageWork prefill;
  StageWork decode;
  int64_t largest_decode_batch = 0;
  // The prefill cache, the decode batch's cache and the turn cache's
  // entries, at their largest together.
  int64_t peak_cache_bytes = 0;
};

struct EngineCallbacks {
  std::function<bool(int32_t)> is_eos;
  // Polled before each decode forward with the decode steps done so far
  // (1 once the first tokens are sampled from the prefill); a non-OK status
  // ends the run with it.
  std::function<absl::Status(int64_t)> stopped;
  // Called (when set) as soon as every response row of prompt `prompt` (its
  // index in the request) has ended: `rows` are the result's rows so far,
  // those of `prompt` (responses_per_prompt from prompt *
  // responses_per_prompt) final. A prompt whose rows end early is reported
  // while other rows still decode. Once per prompt; prompts ending at the
  // same step in request order.
  std::function<void(int64_t prompt, const std::vector<EngineRow>& rows)> group_done;
};

// A row ends at an end-of-sequence token or once its tokens end with one of
// sampling.stop's sequences (the first in request order that matches), but
// not before its prompt's min_new_tokens; a row's end never changes another
// row's draws.
// Partial rollout: a prompt with `resume` rows goes on from them (a
// finished one is kept as it is, reported done at once), each drawing from
// its stream under resume_seed at its next position, so a row paused and
// resumed on the same weights samples the tokens it would have sampled
// without the pause. With request.finish_prompts > 0 the run stops once
// that many prompts are done; the rows left are marked unfinished.
// REQUIRES: under torch::NoGradGuard; request validated (non-empty prompts
// that fit the model with max_new_tokens >= 1, non-empty stop sequences);
// options validated, record_routing only without `turns`. `turns`
// (nullptr: none) is used by this call alone.
// `model` is one Transformer or a tensor-parallel group
// (model/tensor_parallel.h).
absl::StatusOr<EngineResult> RunEngine(model::Decoder& model,
                                       const v1::GenerateRequest& request, int32_t pad_id,
                                       const EngineOptions& options,
                                       const EngineCallbacks& callbacks,
                                       TurnCache* turns = nullptr);
// The same on one Transformer.
absl::StatusOr<EngineResult> RunEngine(model::TransformerImpl& model,
                                       const v1::GenerateRequest& request, int32_t pad_id,
                                       const EngineOptions& options,
                                       const EngineCallbacks& callbacks,
                                       TurnCache* turns = nullptr);

}  // namespace trellis::actor::internal

#endif  // TRELLIS_ACTOR_INTERNAL_ENGINE_H_
