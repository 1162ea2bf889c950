#ifndef TRELLIS_CONFIG_INTERNAL_LIMITS_H_
#define TRELLIS_CONFIG_INTERNAL_LIMITS_H_

// The upper bounds of a job's sizes (config/job_limits.cc; docs/jobs.md
// lists them): no size may make an allocation fail before the memory check
// (config/job_size.h) has had its say, nor overflow the arithmetic that
// sizes tensors.

#include <cstdint>

#include "config/internal/checker.h"
#include "trellis/v1/job.pb.h"

namespace trellis::config::internal {

inline constexpr int32_t kMaxVocabSize = 1 << 22;
inline constexpr int32_t kMaxDModel = 1 << 16;
inline constexpr int32_t kMaxDff = 1 << 18;
inline constexpr int32_t kMaxLayers = 1024;
inline constexpr int32_t kMaxHeads = 1024;
inline constexpr int32_t kMaxHeadDim = 1024;
inline constexpr int32_t kMaxExperts = 1024;
inline constexpr int32_t kMaxSeqLen = 1 << 20;
// Rows of a batch: prompts per step, batch sizes, micro-batches.
inline constexpr int32_t kMaxRows = 1 << 20;
inline constexpr int32_t kMaxResponsesPerPrompt = 1024;
inline constexpr int32_t kMaxSteps = 10'000'000;
// Workers of one kind, threads, verifier processes.
inline constexpr int32_t kMaxWorkers = 1024;
inline constexpr int32_t kMaxProblems = 10'000'000;
inline constexpr float kMaxRewardBound = 1e9f;
inline constexpr int32_t kMaxNonfiniteSkips = 1000;

// Adds a violation to `c` for every size of `job` beyond its bound, every
// reward setting beyond verifier.max_abs_reward, and a data set without
// its held-out half.
void CheckLimits(const v1::JobConfig& job, Checker& c);

// Adds a violation to `c` for every string of `job` with a control
// character (config/printable.h FirstControl) or a NUL: none in names,
// paths and addresses; tabs and line breaks allowed in patterns, commands
// and other text (config/job_strings.cc).
void CheckStrings(const v1::JobConfig& job, Checker& c);

}  // namespace trellis::config::internal

#endif  // TRELLIS_CONFIG_INTERNAL_LIMITS_H_
