#ifndef TRELLIS_ACTOR_INTERNAL_REQUEST_CHECKS_H_
#define TRELLIS_ACTOR_INTERNAL_REQUEST_CHECKS_H_

// What an actor checks of a GenerateRequest before it samples (the
// engine's REQUIRES, actor/internal/engine.h), and the policy versions of a
// partial rollout's resumed tokens.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::actor::internal {

// InvalidArgument, naming `worker` and what is wrong where, unless: the
// sampling has max_new_tokens >= 1 and no empty stop sequence; every prompt
// has tokens and fits max_seq_len with max_new_tokens; min_new_tokens and
// finish_prompts are >= 0; a prompt's `resume`
// holds responses_per_prompt responses, each with a log-prob per token and
// at most max_new_tokens tokens (fewer when unfinished).
absl::Status CheckRequest(const v1::GenerateRequest& request, int64_t max_seq_len,
                          absl::string_view worker);

// Tags `sample` (response `index` of `prompt`, sampled by policy `version`)
// with its tokens' versions: a resumed response's tokens keep theirs
// (Sample.token_versions, or its policy_version) and the ones added here
// are `version`'s. policy_version becomes the oldest; token_versions is
// filled only when they differ.
void TagVersions(const v1::Prompt& prompt, int64_t index, int64_t version, v1::Sample* sample);

}  // namespace trellis::actor::internal

#endif  // TRELLIS_ACTOR_INTERNAL_REQUEST_CHECKS_H_
