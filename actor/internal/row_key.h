#ifndef TRELLIS_ACTOR_INTERNAL_ROW_KEY_H_
#define TRELLIS_ACTOR_INTERNAL_ROW_KEY_H_

// Sampling randomness keyed by the sample, not by the batch it lands in.
// A response row is named by (request seed, prompt id, occurrence of that id
// in the request, response index); its draw at token position t is a
// counter-based uniform of that name and t (splitmix64 rounds, no shared
// generator state). So a row draws the same numbers whichever actor, batch,
// batch split or decode order it gets: a request of 4 prompts samples what
// two requests of 2 sample, and an actor pool samples what one actor does.
//
// The occurrence keeps two copies of one prompt id in a request (a prompt
// stream's epoch boundary can draw a prompt twice in one step) apart: the
// first copy is occurrence 0, the next 1, in request order. A caller that
// splits a request (scheduler/actor_pool.cc) keeps every copy of an id in
// one part, in order, so the occurrences stay the same.

#include <cstdint>
#include <vector>

#include "google/protobuf/repeated_ptr_field.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::actor::internal {

struct RowKey {
  uint64_t seed = 0;
  uint64_t prompt_id = 0;
  uint64_t occurrence = 0;
  uint64_t index = 0;
};

// A uniform in [0, 1) for `key` at token position `position` (0 for the
// first response token).
double RowUniform(const RowKey& key, int64_t position);

// The occurrence of every prompt of `prompts` (see above), in order.
std::vector<uint64_t> Occurrences(const google::protobuf::RepeatedPtrField<v1::Prompt>& prompts);

}  // namespace trellis::actor::internal

#endif  // TRELLIS_ACTOR_INTERNAL_ROW_KEY_H_
