#ifndef TRELLIS_MODEL_TESTING_TENSOR_PARALLEL_CHECK_H_
#define TRELLIS_MODEL_TESTING_TENSOR_PARALLEL_CHECK_H_

// What the tensor-parallel tests (model/tensor_parallel_test.cc, on the
// CPU, and model/tensor_parallel_gpu_test.cc, on CUDA) compare: a group
// against the Transformer it was split from.

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>

#include "gtest/gtest.h"
#include "model/decoder.h"
#include "model/tensor_parallel.h"
#include "model/transformer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model::testing {

// examples/jobs/default_short.yaml's shape, with larger initial weights so
// that the logits differ visibly between tokens.
inline v1::ModelConfig DefaultShape() {
  v1::ModelConfig c;
  c.set_d_model(128);
  c.set_n_layers(2);
  c.set_n_heads(4);
  c.set_n_kv_heads(2);
  c.set_d_ff(384);
  c.set_max_seq_len(32);
  c.set_rope_theta(10000);
  c.set_rms_norm_eps(1e-5);
  c.set_init_std(0.2f);
  return c;
}

inline std::unique_ptr<TensorParallelModel> SplitOf(Transformer& whole, int k,
                                                    const v1::LoraConfig& lora = {}) {
  absl::StatusOr<std::unique_ptr<TensorParallelModel>> group =
      TensorParallelModel::Split(*whole, k, lora);
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? *std::move(group) : nullptr;
}

inline double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

inline torch::Tensor LogProbs(const torch::Tensor& logits) {
  return torch::log_softmax(logits, -1);
}

// Left-padded prompts: the first row has two pads.
struct Prompts {
  torch::Tensor tokens, positions, key_valid;
};

inline Prompts MakePrompts(int64_t vocab) {
  torch::manual_seed(11);
  Prompts p;
  p.tokens = torch::randint(1, vocab, {3, 7}, torch::kLong);
  p.positions = torch::arange(7, torch::kLong).unsqueeze(0).repeat({3, 1});
  p.key_valid = torch::ones({3, 7}, torch::kBool);
  p.key_valid[0].narrow(0, 0, 2).fill_(false);
  p.positions[0] = torch::clamp(p.positions[0] - 2, 0);
  return p;
}

// Full forwards, then a prefill and greedy decode steps with KV caches: the
// group's logits and log-probs within `tolerance` of the whole model's, the
// same greedy tokens, the same keys in the cache. The group and the whole
// model on one device.
inline void ExpectSameAsWhole(Transformer& whole, Decoder& group, int64_t vocab, double tolerance) {
  torch::NoGradGuard no_grad;
  const Prompts p = MakePrompts(vocab);
  const torch::Tensor expected = whole->forward(p.tokens, p.positions, p.key_valid);
  const torch::Tensor got = group.forward(p.tokens, p.positions, p.key_valid);
  EXPECT_LT(MaxDiff(got, expected), tolerance);
  EXPECT_LT(MaxDiff(LogProbs(got), LogProbs(expected)), tolerance);

  KVCache whole_cache = whole->NewCache(3, 16);
  KVCache group_cache = group.NewCache(3, 16);
  ASSERT_EQ(group_cache.keys[0].sizes(), whole_cache.keys[0].sizes());
  torch::Tensor a = whole->forward(p.tokens, p.positions, p.key_valid, &whole_cache);
  torch::Tensor b = group.forward(p.tokens, p.positions, p.key_valid, &group_cache);
  torch::Tensor valid = p.key_valid, positions = p.positions.select(1, 6).unsqueeze(1);
  double largest = 0;
  for (int step = 0; step < 6; ++step) {
    const torch::Tensor la = LogProbs(a.select(1, -1)), lb = LogProbs(b.select(1, -1));
    largest = std::max(largest, MaxDiff(la, lb));
    const torch::Tensor next = la.argmax(-1, /*keepdim=*/true);
    ASSERT_TRUE(torch::equal(next, lb.argmax(-1, /*keepdim=*/true))) << "step " << step;
    valid = torch::cat({valid, torch::ones({3, 1}, torch::kBool)}, 1);
    positions = positions + 1;
    a = whole->forward(next, positions, valid, &whole_cache);
    b = group.forward(next, positions, valid, &group_cache);
  }
  EXPECT_LT(largest, tolerance);
  EXPECT_EQ(group_cache.length, whole_cache.length);
  for (size_t l = 0; l < whole_cache.keys.size(); ++l) {
    EXPECT_LT(MaxDiff(group_cache.keys[l], whole_cache.keys[l]), tolerance) << "layer " << l;
    EXPECT_LT(MaxDiff(group_cache.values[l], whole_cache.values[l]), tolerance) << "layer " << l;
  }
  std::cout << "largest decode log-prob difference: " << largest << "\n";
}

}  // namespace trellis::model::testing

#endif  // TRELLIS_MODEL_TESTING_TENSOR_PARALLEL_CHECK_H_
