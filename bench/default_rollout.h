#ifndef TRELLIS_BENCH_DEFAULT_ROLLOUT_H_
#define TRELLIS_BENCH_DEFAULT_ROLLOUT_H_

// The rollout request the benchmarks time: the job's first `prompts`
// training prompts, its responses per prompt and sampling, seed 1.

#include <utility>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "loop/prompt_format.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::bench {

inline absl::StatusOr<v1::GenerateRequest> RolloutRequest(const v1::JobConfig& job,
                                                          const loop::PromptFormat& format,
                                                          const data::Split& split, int prompts) {
  v1::GenerateRequest request;
  request.set_responses_per_prompt(job.grpo().responses_per_prompt());
  request.set_seed(1);
  request.mutable_sampling()->set_temperature(job.sampling().temperature());
  request.mutable_sampling()->set_top_p(job.sampling().top_p());
  request.mutable_sampling()->set_max_new_tokens(job.sampling().max_new_tokens());
  for (int i = 0; i < prompts; ++i) {
    absl::StatusOr<v1::Prompt> prompt = format.MakePrompt(split.train[i]);
    if (!prompt.ok()) return prompt.status();
    *request.add_prompts() = *std::move(prompt);
  }
  return request;
}

}  // namespace trellis::bench

#endif  // TRELLIS_BENCH_DEFAULT_ROLLOUT_H_
