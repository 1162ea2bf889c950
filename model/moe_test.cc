// Trellis's own mixture of experts (model/moe.h): routing replay, the
// auxiliary loss's gradients, activation checkpointing, bf16, LoRA on the
// attention projections, and the errors. Against transformers:
// model/hf_moe_test.cc.
#include "model/moe.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/policy.h"
#include "model/testing/small_model.h"
#include "model/transformer.h"

namespace trellis::model {
namespace {

using ::testing::HasSubstr;
using testing::kVocab;

trellis::v1::ModelConfig MoeConfig() {
  trellis::v1::ModelConfig c = testing::SmallConfig();
  c.set_num_experts(4);
  c.set_experts_per_token(2);
  c.set_expert_d_ff(24);
  return c;
}

Transformer Build(const trellis::v1::ModelConfig& config,
                  const trellis::v1::LoraConfig& lora = trellis::v1::LoraConfig()) {
  const std::unique_lock<std::recursive_mutex> draws = LockInitialDraws();
  torch::manual_seed(11);
  return Transformer(config, kVocab, Head::kLanguageModel, lora);
}

torch::Tensor Tokens() { return torch::arange(27).view({3, 9}) * 7 % kVocab; }

// A loss that reaches every parameter: the logits' log-sum-exp and the
// auxiliary loss.
torch::Tensor Loss(Transformer& model, const torch::Tensor& tokens, ExpertRouting* routing) {
  const torch::Tensor positions = torch::arange(tokens.size(1)).expand(tokens.sizes());
  const torch::Tensor logits = model->forward(tokens, positions, {}, nullptr, routing);
  return logits.logsumexp(-1).mean() + routing->aux_loss;
}

std::vector<std::pair<std::string, torch::Tensor>> Gradients(Transformer& model) {
  std::vector<std::pair<std::string, torch::Tensor>> grads;
  for (auto& [name, p] : model->NamedWeights()) {
    grads.emplace_back(name, p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  }
  return grads;
}

TEST(MoeTest, NamesShapesAndLayers) {
  Transformer model = Build(MoeConfig());
  EXPECT_EQ(model->moe_layers(), 2);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& [name, p] : model->NamedWeights()) shapes[name] = p.sizes().vec();
  EXPECT_EQ(shapes["model.layers.1.mlp.gate.weight"], (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(shapes["model.layers.1.mlp.experts.gate_up_proj"], (std::vector<int64_t>{4, 48, 32}));
  EXPECT_EQ(shapes["model.layers.1.mlp.experts.down_proj"], (std::vector<int64_t>{4, 32, 24}));
  EXPECT_EQ(shapes.count("model.layers.1.mlp.gate_proj.weight"), 0u);
  EXPECT_EQ(Build(testing::SmallConfig())->moe_layers(), 0);
}

TEST(MoeTest, DenseModelsLeaveTheRoutingUndefined) {
  Transformer model = Build(testing::SmallConfig());
  ExpertRouting routing;
  routing.replay = torch::zeros({3, 9, 2, 2}, torch::kLong);
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = Tokens();
  EXPECT_TRUE(torch::equal(model->forward(tokens, torch::arange(9).expand({3, 9}), {}, nullptr,
                                          &routing),
                           model->forward(tokens)));
  EXPECT_FALSE(routing.chosen.defined());
  EXPECT_FALSE(routing.aux_loss.defined());
}

// The chosen experts, replayed, give the same logits bit for bit; other
// experts change them, while `chosen` stays the router's own.
TEST(MoeTest, ReplayOfTheChosenExpertsIsExact) {
  Transformer model = Build(MoeConfig());
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = Tokens();
  const torch::Tensor positions = torch::arange(9).expand({3, 9});
  ExpertRouting first;
  const torch::Tensor logits = model->forward(tokens, positions, {}, nullptr, &first);
  ASSERT_EQ(first.chosen.sizes(), (std::vector<int64_t>{3, 9, 2, 2}));
  EXPECT_EQ(first.chosen.scalar_type(), torch::kLong);
  ExpertRouting replay;
  replay.replay = first.chosen.to(torch::kInt);
  EXPECT_TRUE(torch::equal(model->forward(tokens, positions, {}, nullptr, &replay), logits));
  ExpertRouting other;
  other.replay = (first.chosen + 1) % 4;
  const torch::Tensor changed = model->forward(tokens, positions, {}, nullptr, &other);
  EXPECT_GT((changed - logits).abs().max().item<float>(), 1e-3f);
  // The first layer's router sees the same input (later ones do not).
  EXPECT_TRUE(torch::equal(other.chosen.select(2, 0), first.chosen.select(2, 0)));
}

// Under replay the router still gets gradients, from the weights of the
// replayed experts and from the auxiliary loss.
TEST(MoeTest, GradientsReachTheRouterUnderReplay) {
  trellis::v1::ModelConfig config = MoeConfig();
  for (bool normalize : {true, false}) {
    config.set_normalize_expert_weights(normalize);
    Transformer model = Build(config);
    const torch::Tensor tokens = Tokens();
    ExpertRouting routing;
    {
      torch::NoGradGuard no_grad;
      model->forward(tokens, torch::arange(9).expand({3, 9}), {}, nullptr, &routing);
    }
    routing.replay = (routing.chosen + 1) % 4;
    const torch::Tensor positions = torch::arange(9).expand({3, 9});
    model->forward(tokens, positions, {}, nullptr, &routing).logsumexp(-1).mean().backward();
    for (int layer : {0, 1}) {
      const torch::Tensor grad =
          model->named_parameters()[absl::StrCat("model.layers.", layer, ".mlp.gate.weight")]
              .grad();
      ASSERT_TRUE(grad.defined()) << layer;
      EXPECT_GT(grad.abs().max().item<float>(), 0.f) << "layer " << layer << " normalize "
                                                      << normalize;
    }
  }
}

// Checkpointed blocks give the gradients (logits and auxiliary loss) of
// the plain forward, with and without replay, and the same routing out.
TEST(MoeTest, ActivationCheckpointingGivesTheSameGradients) {
  const torch::Tensor tokens = Tokens();
  for (bool replay : {false, true}) {
    std::vector<std::vector<std::pair<std::string, torch::Tensor>>> grads;
    std::vector<ExpertRouting> outs;
    for (bool checkpointing : {false, true}) {
      Transformer model = Build(MoeConfig());
      model->set_activation_checkpointing(checkpointing);
      ExpertRouting routing;
      if (replay) {
        const torch::Tensor first = torch::arange(3 * 9 * 2).view({3, 9, 2}) % 4;
        routing.replay = torch::stack({first, (first + 1) % 4}, 3);
      }
      Loss(model, tokens, &routing).backward();
      EXPECT_EQ(model->recompute_seconds() > 0, checkpointing);
      grads.push_back(Gradients(model));
      outs.push_back(routing);
    }
    EXPECT_TRUE(torch::equal(outs[0].chosen, outs[1].chosen));
    EXPECT_TRUE(torch::allclose(outs[0].aux_loss, outs[1].aux_loss));
    for (size_t i = 0; i < grads[0].size(); ++i) {
      EXPECT_TRUE(torch::allclose(grads[0][i].second, grads[1][i].second, 1e-5, 1e-6))
          << grads[0][i].first << (replay ? " with replay" : "");
    }
  }
}

TEST(MoeTest, Bf16ForwardAndBackwardRun) {
  Transformer model = Build(MoeConfig());
  const torch::Tensor tokens = Tokens();
  torch::Tensor fp32;
  {
    torch::NoGradGuard no_grad;
    fp32 = model->forward(tokens);
  }
  model->SetParameterDtype(torch::kBFloat16);
  ExpertRouting routing;
  const torch::Tensor loss = Loss(model, tokens, &routing);
  loss.backward();
  EXPECT_TRUE(torch::isfinite(loss).item<bool>());
  torch::NoGradGuard no_grad;
  const torch::Tensor bf16 = model->forward(tokens);
  EXPECT_EQ(bf16.scalar_type(), torch::kFloat32);
  EXPECT_LT((bf16 - fp32).abs().mean().item<float>(), 0.05f * fp32.abs().mean().item<float>());
}

// LoRA on the attention projections of a mixture of experts trains the
// adapters alone.
TEST(MoeTest, LoraOnAttentionTrainsTheAdapters) {
  trellis::v1::LoraConfig lora;
  lora.set_rank(2);
  lora.set_alpha(4);
  Transformer model = Build(MoeConfig(), lora);
  ExpertRouting routing;
  Loss(model, Tokens(), &routing).backward();
  for (auto& [name, p] : model->NamedWeights()) {
    EXPECT_EQ(p.requires_grad(), IsAdapterName(name)) << name;
  }
  EXPECT_EQ(model->AdapterWeights().size(), 2u * 2 * 2);  // q and v, A and B, 2 layers
}

TEST(MoeTest, BadReplayIsAnError) {
  Transformer model = Build(MoeConfig());
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = Tokens();
  const torch::Tensor positions = torch::arange(9).expand({3, 9});
  auto message = [&](torch::Tensor replay) {
    ExpertRouting routing;
    routing.replay = std::move(replay);
    try {
      model->forward(tokens, positions, {}, nullptr, &routing);
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message(torch::zeros({3, 9, 2, 3}, torch::kLong)),
              HasSubstr("must be [B, T, MoE layers, experts_per_token] = [3, 9, 2, 2]"));
  EXPECT_THAT(message(torch::full({3, 9, 2, 2}, 4, torch::kLong)),
              HasSubstr("names experts outside [0, 4)"));
  EXPECT_THAT(message(torch::zeros({3, 9, 2, 2}, torch::kLong)),
              HasSubstr("names an expert twice at one position"));
  EXPECT_THAT(message(torch::zeros({3, 9, 2, 2})), HasSubstr("must hold integer experts"));
}

}  // namespace
}  // namespace trellis::model
