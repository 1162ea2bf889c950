#include "loop/loop_util.h"

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
  counts->value_loss = stats.value_loss();
  counts->value_clip_fraction = stats.value_clip_fraction();
  counts->reward_margin = stats.reward_margin();
  counts->preference_accuracy = stats.preference_accuracy();
  counts->recompute_seconds = stats.recompute_seconds();
  counts->communication_bytes = stats.communication_bytes();
  counts->communication_seconds = stats.communication_seconds();
}

double SumLogProbs(const google::protobuf::RepeatedField<float>& logprobs) {
  double sum = 0;
  for (float v : logprobs) sum += v;
  return sum;
}

absl::StatusOr<v1::Prompt> MakePrompt(const text::Tokenizer& tokenizer,
                                      const data::Example& example) {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(example.prompt);
  if (!ids.ok()) return At(ids.status(), absl::StrCat("prompt ", example.id));
  v1::Prompt prompt;
  prompt.set_id(example.id);
  prompt.set_text(example.prompt);
  prompt.set_answer(example.answer);
  if (std::optional<int32_t> bos = tokenizer.bos_id()) prompt.add_token_ids(*bos);
  prompt.mutable_token_ids()->Add(ids->begin(), ids->end());
  return prompt;
}

absl::StatusOr<std::vector<int32_t>> ResponseTokens(const text::Tokenizer& tokenizer,
                                                    const std::string& text,
                                                    const std::string& what) {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text);
  if (!ids.ok()) return At(ids.status(), what);
  ids->push_back(tokenizer.eos_id());
  return ids;
}

absl::StatusOr<v1::SftBatch::Pair> MakeSftPair(const text::Tokenizer& tokenizer,
                                               const data::Example& example) {
  absl::StatusOr<v1::Prompt> prompt = MakePrompt(tokenizer, example);
  if (!prompt.ok()) return prompt.status();
  absl::StatusOr<std::vector<int32_t>> target =
      ResponseTokens(tokenizer, example.answer, absl::StrCat("answer of example ", example.id));
  if (!target.ok()) return target.status();
  v1::SftBatch::Pair pair;
  *pair.mutable_prompt_tokens() = prompt->token_ids();
  pair.mutable_target_tokens()->Add(target->begin(), target->end());
  return pair;
}

}  // namespace trellis::loop
