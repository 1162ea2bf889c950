#ifndef TRELLIS_MODEL_TESTING_SMALL_MODEL_H_
#define TRELLIS_MODEL_TESTING_SMALL_MODEL_H_

// The small transformer the model tests share, and its vocabulary.

#include <cstdint>

#include "trellis/v1/job.pb.h"

namespace trellis::model::testing {

inline constexpr int64_t kVocab = 23;

// d_model 32, 2 layers, 4 heads over 2 KV heads, d_ff 48, up to 32 tokens;
// init_std 0.2, larger than the default so that logits differ visibly
// between inputs.
inline trellis::v1::ModelConfig SmallConfig() {
  trellis::v1::ModelConfig c;
  c.set_d_model(32);
  c.set_n_layers(2);
  c.set_n_heads(4);
  c.set_n_kv_heads(2);
  c.set_d_ff(48);
  c.set_max_seq_len(32);
  c.set_init_std(0.2f);
  return c;
}

}  // namespace trellis::model::testing

#endif  // TRELLIS_MODEL_TESTING_SMALL_MODEL_H_
