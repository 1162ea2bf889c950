#ifndef TRELLIS_MODEL_TOKEN_IDS_H_
#define TRELLIS_MODEL_TOKEN_IDS_H_

// A job's vocabulary, and checks of token ids that arrive from outside a
// role (over the wire) before they index an embedding.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/repeated_field.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {

// The vocabulary every model of a job has: config.vocab_size(), or the
// tokenizer's size when the job leaves it 0.
inline int64_t VocabSize(const trellis::v1::ModelConfig& config, int64_t tokenizer_vocab_size) {
  return config.vocab_size() > 0 ? config.vocab_size() : tokenizer_vocab_size;
}

// InvalidArgument naming `where` and the position unless every id is in
// [0, vocab_size).
inline absl::Status CheckTokenIds(const google::protobuf::RepeatedField<int32_t>& ids,
                                  int64_t vocab_size, const std::string& where) {
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(where, "[", i, "] = ", ids[i],
                                                     ": outside the vocabulary [0, ",
                                                     vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

// Both id lists of samples[index] (a v1::Sample or v1::TrainSample).
template <typename SampleT>
absl::Status CheckSampleTokenIds(const SampleT& sample, int64_t vocab_size, int index) {
  const std::string where = absl::StrCat("samples[", index, "].");
  absl::Status s = CheckTokenIds(sample.prompt_tokens(), vocab_size, where + "prompt_tokens");
  if (!s.ok()) return s;
  return CheckTokenIds(sample.response_tokens(), vocab_size, where + "response_tokens");
}

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_TOKEN_IDS_H_
