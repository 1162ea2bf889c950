#include "loop/loop_util.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"

namespace trellis::loop {

absl::Status At(const absl::Status& status, absl::string_view where) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
}

uint64_t MixSeed(uint64_t seed, uint64_t salt) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (salt + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void RecordUpdate(const v1::TrainStats& stats, ledger::StepCounts* counts) {
  counts->trained_tokens = stats.trained_tokens();
  counts->loss = stats.loss();
  counts->kl = stats.kl();
  counts->clip_fraction = stats.clip_fraction();
  counts->grad_norm = stats.grad_norm();
  counts->steps_skipped_nonfinite += stats.skipped_nonfinite() ? 1 : 0;
  counts->value_loss = stats.value_loss();
  counts->value_clip_fraction = stats.value_clip_fraction();
  counts->reward_margin = stats.reward_margin();
  counts->preference_accuracy = stats.preference_accuracy();
  counts->recompute_seconds = stats.recompute_seconds();
  counts->communication_bytes = stats.communication_bytes();
  counts->communication_seconds = stats.communication_seconds();
  counts->teacher_divergence = stats.teacher_divergence();
}

double SumLogProbs(const google::protobuf::RepeatedField<float>& logprobs) {
  double sum = 0;
  for (float v : logprobs) sum += v;
  return sum;
}

v1::SamplingParams TrainSampling(const v1::JobConfig& job) {
  v1::SamplingParams p;
  p.set_temperature(job.sampling().temperature());
  p.set_top_p(job.sampling().top_p());
  p.set_max_new_tokens(job.sampling().max_new_tokens());
  return p;
}

}  // namespace trellis::loop
