#ifndef TRELLIS_ACTOR_INTERNAL_PREFILL_H_
#define TRELLIS_ACTOR_INTERNAL_PREFILL_H_

// The engine's prefill (actor/internal/engine.h): prompts run through the
// model as one left-padded batch, their caches right-aligned. A prompt that
// extends an entry of the turn cache (actor/internal/turn_cache.h) starts
// from that entry's keys and values and runs only its remaining tokens.

#include <cstdint>
#include <string>
#include <vector>

#include "actor/internal/engine.h"
#include "actor/internal/turn_cache.h"
#include "google/protobuf/repeated_field.h"
#include "model/decoder.h"
#include "model/transformer.h"

namespace trellis::actor::internal {

struct Prefill {
  // Each sequence's positions, right-aligned at cache.length.
  model::KVCache cache;
  torch::Tensor key_valid;  // [S, cache.length] bool
  torch::Tensor logits;     // [S, V] at each sequence's last token
  // With record_routing: each sequence's experts, position by position
  // (model/routing_record.h); empty otherwise.
  std::vector<std::string> routing;
};

// Prefills `sequences`, taking from `turns` (nullptr: none) each one's
// longest cached prefix. Adds to result's prefill_tokens (the tokens run),
// reused_tokens (those taken from `turns`) and prefill work.
// REQUIRES: under torch::NoGradGuard; non-empty sequences; no `turns` with
// record_routing.
Prefill RunPrefill(model::Decoder& model,
                   const std::vector<const google::protobuf::RepeatedField<int32_t>*>& sequences,
                   int32_t pad_id, TurnCache* turns, bool record_routing, EngineResult* result);

}  // namespace trellis::actor::internal

#endif  // TRELLIS_ACTOR_INTERNAL_PREFILL_H_
