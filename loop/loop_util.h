#ifndef TRELLIS_LOOP_LOOP_UTIL_H_
#define TRELLIS_LOOP_LOOP_UTIL_H_

// Pieces the driver and the recipes share: error context, per-step seeds,
// a bounded parallel for, and what an update reports.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"
#include "ledger/ledger.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::loop {

// `status` with its message prefixed by "where: " (OK stays OK).
absl::Status At(const absl::Status& status, absl::string_view where);

// SplitMix64: a well-spread seed from the job seed and a salt (a step).
uint64_t MixSeed(uint64_t seed, uint64_t salt);

// What a learner update reports that every loop records: tokens, loss, KL,
// clipping, gradient norm, value and preference stats, the divergence to
// a distill teacher, and the memory strategies' costs (recompute,
// communication). The loop sets accuracy.
void RecordUpdate(const v1::TrainStats& stats, ledger::StepCounts* counts);

// The job's sampling settings (temperature, top_p, max_new_tokens) for a
// rollout request.
v1::SamplingParams TrainSampling(const v1::JobConfig& job);

// The sum of a response's per-token log-probs.
double SumLogProbs(const google::protobuf::RepeatedField<float>& logprobs);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_LOOP_UTIL_H_
