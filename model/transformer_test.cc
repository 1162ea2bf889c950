#include "model/transformer.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/testing/small_model.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {
namespace {

using ::testing::HasSubstr;

using trellis::model::testing::kVocab;

using trellis::model::testing::SmallConfig;

Transformer MakeModel(const trellis::v1::ModelConfig& c, uint64_t seed = 7) {
  torch::manual_seed(seed);
  return Transformer(c, kVocab);
}

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// An independent, loop-based Llama forward for one unpadded row [T], used to
// check the model's vectorized attention, rotary and GQA layout.
torch::Tensor ReferenceForward(Transformer& model, const torch::Tensor& row) {
  std::map<std::string, torch::Tensor> w;
  for (auto& [name, t] : model->NamedWeights()) w[name] = t;
  const auto& c = model->config();
  const int64_t T = row.size(0), H = c.n_heads(), KV = c.n_kv_heads();
  const int64_t hd = c.d_model() / H, half = hd / 2;
  auto rms = [&](const torch::Tensor& x, const torch::Tensor& g) {
    return x / torch::sqrt(x.pow(2).mean(-1, true) + c.rms_norm_eps()) * g;
  };
  auto rope = [&](const torch::Tensor& x) {  // x: [T, hd]
    torch::Tensor out = torch::empty_like(x);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = t * std::pow(c.rope_theta(), -2.0 * i / hd);
        const auto a = x[t][i], b = x[t][i + half];
        out[t][i] = a * std::cos(angle) - b * std::sin(angle);
        out[t][i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
    return out;
  };
  torch::Tensor h = w["model.embed_tokens.weight"].index_select(0, row);
  for (int64_t l = 0; l < c.n_layers(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    torch::Tensor x = rms(h, w[p + "input_layernorm.weight"]);
    torch::Tensor q = torch::matmul(x, w[p + "self_attn.q_proj.weight"].t());
    torch::Tensor k = torch::matmul(x, w[p + "self_attn.k_proj.weight"].t());
    torch::Tensor v = torch::matmul(x, w[p + "self_attn.v_proj.weight"].t());
    std::vector<torch::Tensor> heads;
    for (int64_t head = 0; head < H; ++head) {
      const int64_t kv = head / (H / KV);
      torch::Tensor qh = rope(q.narrow(1, head * hd, hd));
      torch::Tensor kh = rope(k.narrow(1, kv * hd, hd));
      torch::Tensor s = torch::matmul(qh, kh.t()) / std::sqrt(double(hd));
      s = s.masked_fill(torch::ones({T, T}, torch::kBool).triu(1), -1e30);
      heads.push_back(torch::matmul(torch::softmax(s, -1), v.narrow(1, kv * hd, hd)));
    }
    h = h + torch::matmul(torch::cat(heads, 1), w[p + "self_attn.o_proj.weight"].t());
    x = rms(h, w[p + "post_attention_layernorm.weight"]);
    torch::Tensor g = torch::matmul(x, w[p + "mlp.gate_proj.weight"].t());
    torch::Tensor u = torch::matmul(x, w[p + "mlp.up_proj.weight"].t());
    h = h + torch::matmul(g * torch::sigmoid(g) * u, w[p + "mlp.down_proj.weight"].t());
  }
  h = rms(h, w["model.norm.weight"]);
  const torch::Tensor head = c.tie_embeddings() ? w["model.embed_tokens.weight"]
                                                : w["lm_head.weight"];
  return torch::matmul(h, head.t());
}

TEST(TransformerTest, MatchesLoopReference) {
  torch::NoGradGuard no_grad;
  for (int kv_heads : {1, 2, 4}) {
    for (bool tied : {false, true}) {
      SCOPED_TRACE("kv_heads=" + std::to_string(kv_heads) + " tied=" + std::to_string(tied));
      auto c = SmallConfig();
      c.set_n_kv_heads(kv_heads);
      c.set_tie_embeddings(tied);
      Transformer model = MakeModel(c);
      torch::Tensor row = torch::randint(kVocab, {9}, torch::kLong);
      torch::Tensor logits = model->forward(row.unsqueeze(0));
      ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{1, 9, kVocab}));
      EXPECT_LT(MaxAbsDiff(logits[0], ReferenceForward(model, row)), 1e-5);
    }
  }
}

TEST(TransformerTest, KVCacheDecodeEqualsFullForward) {
  torch::NoGradGuard no_grad;
  Transformer model = MakeModel(SmallConfig());
  const int64_t T = 10, prompt = 4;
  torch::Tensor tokens = torch::randint(kVocab, {2, T}, torch::kLong);
  torch::Tensor full = model->forward(tokens);

  KVCache cache = model->NewCache(2, T);
  torch::Tensor pos = torch::arange(T, torch::kLong).unsqueeze(0).expand({2, T});
  torch::Tensor pre = model->forward(tokens.narrow(1, 0, prompt), pos.narrow(1, 0, prompt),
                                     {}, &cache);
  EXPECT_EQ(cache.length, prompt);
  EXPECT_LT(MaxAbsDiff(pre, full.narrow(1, 0, prompt)), 1e-5);
  for (int64_t t = prompt; t < T; ++t) {
    torch::Tensor step = model->forward(tokens.narrow(1, t, 1), pos.narrow(1, t, 1), {}, &cache);
    EXPECT_EQ(cache.length, t + 1);
    EXPECT_LT(MaxAbsDiff(step, full.narrow(1, t, 1)), 1e-5) << "step " << t;
  }
}

// Rows with prompts of different lengths, left-padded into one batch, then
// decoded together; every real logit must equal the row run alone.
TEST(TransformerTest, LeftPaddedBatchWithCacheEqualsRowsAlone) {
  torch::NoGradGuard no_grad;
  auto c = SmallConfig();
  c.set_n_kv_heads(1);
  Transformer model = MakeModel(c);
  const std::vector<int64_t> lens = {2, 5, 3, 1};
  const int64_t B = 4, P = 5, steps = 4;
  // Teacher-forced sequences: prompt then `steps` continuation tokens.
  std::vector<torch::Tensor> rows, alone;
  for (int64_t len : lens) {
    rows.push_back(torch::randint(3, kVocab, {len + steps}, torch::kLong));
    alone.push_back(model->forward(rows.back().unsqueeze(0))[0]);
  }
  // Padding holds garbage tokens: masking must make them irrelevant.
  torch::Tensor prompt = torch::randint(kVocab, {B, P}, torch::kLong);
  torch::Tensor positions = torch::zeros({B, P}, torch::kLong);
  torch::Tensor valid = torch::zeros({B, P}, torch::kBool);
  for (int64_t i = 0; i < B; ++i) {
    const int64_t pad = P - lens[i];
    prompt[i].narrow(0, pad, lens[i]).copy_(rows[i].narrow(0, 0, lens[i]));
    positions[i].narrow(0, pad, lens[i]).copy_(torch::arange(lens[i]));
    valid[i].narrow(0, pad, lens[i]).fill_(true);
  }

  // Without a cache (the training path) ...
  torch::Tensor nocache = model->forward(prompt, positions, valid);
  EXPECT_FALSE(torch::isnan(nocache).any().item<bool>());
  // ... and with one.
  KVCache cache = model->NewCache(B, P + steps);
  torch::Tensor pre = model->forward(prompt, positions, valid, &cache);
  EXPECT_FALSE(torch::isnan(pre).any().item<bool>());
  for (int64_t i = 0; i < B; ++i) {
    const int64_t pad = P - lens[i];
    EXPECT_LT(MaxAbsDiff(pre[i].narrow(0, pad, lens[i]), alone[i].narrow(0, 0, lens[i])), 1e-5)
        << "row " << i;
    EXPECT_LT(MaxAbsDiff(nocache[i].narrow(0, pad, lens[i]),
                         alone[i].narrow(0, 0, lens[i])), 1e-5) << "row " << i;
  }
  for (int64_t s = 0; s < steps; ++s) {
    torch::Tensor tok = torch::empty({B, 1}, torch::kLong);
    torch::Tensor pos = torch::empty({B, 1}, torch::kLong);
    for (int64_t i = 0; i < B; ++i) {
      tok[i][0] = rows[i][lens[i] + s];
      pos[i][0] = lens[i] + s;
    }
    valid = torch::cat({valid, torch::ones({B, 1}, torch::kBool)}, 1);
    torch::Tensor step = model->forward(tok, pos, valid, &cache);
    for (int64_t i = 0; i < B; ++i) {
      EXPECT_LT(MaxAbsDiff(step[i][0], alone[i][lens[i] + s]), 1e-5)
          << "row " << i << " step " << s;
    }
  }
}

TEST(TransformerTest, LaterTokensNeverChangeEarlierLogits) {
  torch::NoGradGuard no_grad;
  Transformer model = MakeModel(SmallConfig());
  torch::Tensor a = torch::randint(kVocab, {3, 8}, torch::kLong);
  torch::Tensor b = a.clone();
  b.narrow(1, 5, 3).copy_((a.narrow(1, 5, 3) + 1) % kVocab);
  torch::Tensor la = model->forward(a), lb = model->forward(b);
  EXPECT_TRUE(torch::equal(la.narrow(1, 0, 5), lb.narrow(1, 0, 5)));
  EXPECT_GT(MaxAbsDiff(la.narrow(1, 5, 3), lb.narrow(1, 5, 3)), 1e-3);
}

TEST(TransformerTest, GqaCacheShapesAndBytes) {
  auto c = SmallConfig();
  c.set_n_heads(8);
  c.set_n_kv_heads(2);
  Transformer model = MakeModel(c);
  KVCache cache = model->NewCache(3, 12);
  ASSERT_EQ(cache.keys.size(), 2u);
  EXPECT_EQ(cache.keys[0].sizes(), (std::vector<int64_t>{3, 2, 12, 4}));
  EXPECT_EQ(cache.bytes(), 2 * 2 * 3 * 2 * 12 * 4 * 4);
  torch::NoGradGuard no_grad;
  torch::Tensor tokens = torch::randint(kVocab, {3, 6}, torch::kLong);
  torch::Tensor pos = torch::arange(6, torch::kLong).unsqueeze(0).expand({3, 6});
  EXPECT_EQ(model->forward(tokens, pos, {}, &cache).sizes(),
            (std::vector<int64_t>{3, 6, kVocab}));
  EXPECT_LT(MaxAbsDiff(model->forward(tokens), model->forward(tokens)), 1e-6);
}

TEST(TransformerTest, NamedWeightsFollowLlamaLayout) {
  auto c = SmallConfig();
  Transformer model = MakeModel(c);
  std::vector<std::string> expected = {"model.embed_tokens.weight"};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* s : {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                          "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      expected.push_back(p + s + ".weight");
    }
  }
  expected.push_back("model.norm.weight");
  std::vector<std::string> names;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& [name, t] : model->NamedWeights()) {
    names.push_back(name);
    shapes[name] = t.sizes().vec();
  }
  auto untied = expected;
  untied.push_back("lm_head.weight");
  EXPECT_EQ(names, untied);
  EXPECT_EQ(shapes["model.embed_tokens.weight"], (std::vector<int64_t>{kVocab, 32}));
  EXPECT_EQ(shapes["model.layers.0.self_attn.q_proj.weight"], (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(shapes["model.layers.0.self_attn.k_proj.weight"], (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(shapes["model.layers.1.mlp.down_proj.weight"], (std::vector<int64_t>{32, 48}));
  EXPECT_EQ(shapes["model.norm.weight"], (std::vector<int64_t>{32}));
  EXPECT_EQ(shapes["lm_head.weight"], (std::vector<int64_t>{kVocab, 32}));
  EXPECT_TRUE(torch::equal(model->NamedWeights()[1].second, torch::ones({32})));

  c.set_tie_embeddings(true);
  names.clear();
  for (auto& [name, t] : MakeModel(c)->NamedWeights()) names.push_back(name);
  EXPECT_EQ(names, expected);
}

TEST(TransformerTest, TiedHeadUsesEmbedding) {
  torch::NoGradGuard no_grad;
  auto c = SmallConfig();
  c.set_tie_embeddings(true);
  Transformer model = MakeModel(c);
  torch::Tensor tokens = torch::randint(3, 10, {2, 5}, torch::kLong);  // no token 20
  torch::Tensor before = model->forward(tokens);
  model->NamedWeights()[0].second[20].mul_(10.0);
  torch::Tensor after = model->forward(tokens);
  EXPECT_LT(MaxAbsDiff(after.select(2, 20), before.select(2, 20) * 10.0), 1e-5);
  EXPECT_TRUE(torch::equal(after.narrow(2, 0, 20), before.narrow(2, 0, 20)));
}

TEST(TransformerTest, SameSeedSameWeights) {
  auto a = MakeModel(SmallConfig(), 3)->NamedWeights();
  auto b = MakeModel(SmallConfig(), 3)->NamedWeights();
  auto d = MakeModel(SmallConfig(), 4)->NamedWeights();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second));
  EXPECT_FALSE(torch::equal(a[0].second, d[0].second));
}

TEST(TransformerTest, LoadWeightsRoundtripAndErrors) {
  torch::NoGradGuard no_grad;
  Transformer src = MakeModel(SmallConfig(), 1);
  Transformer dst = MakeModel(SmallConfig(), 2);
  torch::Tensor tokens = torch::randint(kVocab, {2, 6}, torch::kLong);
  const torch::Tensor dst_before = dst->forward(tokens).clone();

  auto weights = src->NamedWeights();
  auto bad_shape = weights;
  bad_shape[7].second = torch::zeros({3, 3});  // after earlier valid tensors
  absl::Status s = dst->LoadWeights(bad_shape);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr(weights[7].first));
  EXPECT_THAT(std::string(s.message()), HasSubstr("[3, 3]"));
  EXPECT_TRUE(torch::equal(dst->forward(tokens), dst_before));  // nothing changed

  auto missing = weights;
  missing.pop_back();
  s = dst->LoadWeights(missing);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("lm_head.weight"));

  auto unknown = weights;
  unknown.emplace_back("model.layers.9.mlp.up_proj.weight", torch::zeros({48, 32}));
  s = dst->LoadWeights(unknown);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.layers.9.mlp.up_proj.weight"));
  EXPECT_TRUE(torch::equal(dst->forward(tokens), dst_before));

  ASSERT_TRUE(dst->LoadWeights(weights).ok());
  EXPECT_TRUE(torch::equal(dst->forward(tokens), src->forward(tokens)));
  // A copy, not an alias.
  EXPECT_NE(dst->NamedWeights()[0].second.data_ptr(), weights[0].second.data_ptr());
}

TEST(TransformerTest, GradientsFlowThroughPaddedBatch) {
  Transformer model = MakeModel(SmallConfig());
  torch::Tensor tokens = torch::randint(kVocab, {2, 6}, torch::kLong);
  torch::Tensor valid = torch::ones({2, 6}, torch::kBool);
  valid[0].narrow(0, 0, 3).fill_(false);
  torch::Tensor pos = torch::clamp(torch::arange(6, torch::kLong) -
                                       torch::tensor({3, 0}, torch::kLong).unsqueeze(1),
                                   0);
  torch::Tensor logits = model->forward(tokens, pos, valid);
  logits.log_softmax(-1).mean().backward();
  for (auto& [name, t] : model->NamedWeights()) {
    ASSERT_TRUE(t.grad().defined()) << name;
    EXPECT_TRUE(torch::isfinite(t.grad()).all().item<bool>()) << name;
  }
}

// Per-block recomputation runs the same operations again: the gradients
// equal the plain backward's, and the recompute time is counted.
TEST(TransformerTest, ActivationCheckpointingGivesTheSameGradients) {
  trellis::v1::ModelConfig c = SmallConfig();
  c.set_n_layers(3);
  Transformer plain = MakeModel(c);
  Transformer ckpt = MakeModel(c);
  ckpt->set_activation_checkpointing(true);
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(kVocab, {3, 9}, torch::kLong);
  const torch::Tensor weights = torch::randn({3, 9, kVocab});
  (plain->forward(tokens) * weights).sum().backward();
  (ckpt->forward(tokens) * weights).sum().backward();
  const auto plain_params = plain->named_parameters();
  const auto ckpt_params = ckpt->named_parameters();
  for (const auto& p : plain_params) {
    ASSERT_TRUE(ckpt_params[p.key()].grad().defined()) << p.key();
    EXPECT_LT(MaxAbsDiff(p.value().grad(), ckpt_params[p.key()].grad()), 1e-6) << p.key();
  }
  EXPECT_GT(ckpt->recompute_seconds(), 0);
  EXPECT_EQ(plain->recompute_seconds(), 0);
  // Without autograd (sampling, scoring) nothing is recomputed.
  const double before = ckpt->recompute_seconds();
  torch::NoGradGuard no_grad;
  EXPECT_LT(MaxAbsDiff(ckpt->forward(tokens), plain->forward(tokens)), 1e-6);
  EXPECT_EQ(ckpt->recompute_seconds(), before);
}

// A model whose base does not train (LoRA's frozen weights) still gets
// gradients through a checkpointed block's parameters.
TEST(TransformerTest, ActivationCheckpointingWorksBehindAFrozenEmbedding) {
  Transformer model = MakeModel(SmallConfig());
  model->set_activation_checkpointing(true);
  for (auto& p : model->named_parameters()) {
    if (p.key() == "model.embed_tokens.weight") p.value().set_requires_grad(false);
  }
  const torch::Tensor tokens = torch::randint(kVocab, {2, 5}, torch::kLong);
  model->forward(tokens).sum().backward();
  for (const auto& p : model->named_parameters()) {
    if (p.key() == "model.embed_tokens.weight") continue;
    EXPECT_TRUE(p.value().grad().defined()) << p.key();
  }
}

// bf16 weights: the head's output stays float32 and near the fp32 model's.
TEST(TransformerTest, Bf16ParametersGiveFloat32LogitsNearFp32) {
  Transformer fp32 = MakeModel(SmallConfig());
  Transformer bf16 = MakeModel(SmallConfig());
  bf16->SetParameterDtype(torch::kBFloat16);
  for (const auto& p : bf16->parameters()) EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(kVocab, {2, 7}, torch::kLong);
  const torch::Tensor a = fp32->forward(tokens);
  const torch::Tensor b = bf16->forward(tokens);
  EXPECT_EQ(b.scalar_type(), torch::kFloat32);
  EXPECT_LT(MaxAbsDiff(a, b), 0.05 * a.abs().max().item<double>());
}

}  // namespace
}  // namespace trellis::model
