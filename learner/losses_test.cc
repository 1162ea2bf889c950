// Losses and advantages against values worked out by hand.

#include "learner/losses.h"

#include <cmath>

#include "gtest/gtest.h"
#include "learner/objectives.h"

namespace trellis::learner {
namespace {

torch::Tensor T(std::vector<float> v, int64_t rows = 1) {
  const int64_t cols = static_cast<int64_t>(v.size()) / rows;
  return torch::tensor(v, torch::kFloat32).reshape({rows, cols});
}

void ExpectNear(const torch::Tensor& got, std::vector<float> want, double tol = 1e-5) {
  const torch::Tensor flat = got.reshape({-1}).to(torch::kFloat64);
  ASSERT_EQ(flat.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(flat[i].item<double>(), want[i], tol) << "element " << i;
  }
}

TEST(GaeTest, UndiscountedIsRewardToGoMinusValue) {
  Gae g = ComputeGae(T({0, 0, 1}), T({0.5, 0.5, 0.5}), T({1, 1, 1}), 1.0, 1.0);
  ExpectNear(g.advantages, {0.5, 0.5, 0.5});
  ExpectNear(g.returns, {1, 1, 1});
}

TEST(GaeTest, GammaLambdaAndMaskedPadding) {
  // Row 0: delta2 = 2, A2 = 2; delta1 = 0 + 0.9*0 - 1 = -1, A1 = -1 + 0.45*2
  // = -0.1; delta0 = 1 + 0.9*1 - 0.5 = 1.4, A0 = 1.4 + 0.45*(-0.1) = 1.355.
  // Row 1 (last position padding): A1 = 1 - 0.5 = 0.5;
  // A0 = (0 + 0.9*0.5 - 0.5) + 0.45*0.5 = 0.175.
  Gae g = ComputeGae(T({1, 0, 2, 0, 1, 7}, 2), T({0.5, 1.0, 0.0, 0.5, 0.5, 9}, 2),
                     T({1, 1, 1, 1, 1, 0}, 2), 0.9, 0.5);
  ExpectNear(g.advantages, {1.355f, -0.1f, 2.0f, 0.175f, 0.5f, 0.0f});
  ExpectNear(g.returns, {1.855f, 0.9f, 2.0f, 0.675f, 1.0f, 0.0f});
}

// A multi-turn response: a turn, an observation (mask 0), a turn. GAE runs
// over the policy's tokens only: the observation's rewards and values are
// ignored and the turn before it bootstraps from the next turn's first
// token, one discount step across the observation.
// t4: A = 1 - 0.5 = 0.5. t1: delta = 0 + 0.9*0.5 - 1 = -0.55,
// A = -0.55 + 0.45*0.5 = -0.325. t0: delta = 0 + 0.9*1 - 0.5 = 0.4,
// A = 0.4 + 0.45*(-0.325) = 0.25375.
TEST(GaeTest, ObservationTokensInTheMiddleAreSkipped) {
  Gae g = ComputeGae(T({0, 0, 5, 5, 1}), T({0.5, 1.0, 9, 9, 0.5}), T({1, 1, 0, 0, 1}), 0.9, 0.5);
  ExpectNear(g.advantages, {0.25375f, -0.325f, 0.0f, 0.0f, 0.5f});
  ExpectNear(g.returns, {0.75375f, 0.675f, 0.0f, 0.0f, 1.0f});
  Gae other =
      ComputeGae(T({0, 0, -3, 2, 1}), T({0.5, 1.0, -4, 0, 0.5}), T({1, 1, 0, 0, 1}), 0.9, 0.5);
  ExpectNear(other.advantages, {0.25375f, -0.325f, 0.0f, 0.0f, 0.5f});
}

TEST(ValueLossTest, ClipTakesTheWorseOfClippedAndUnclipped) {
  // Token 0: unclipped (1 - 1.2)^2 = 0.04; clipped 0 + 0.2 -> (0.2 - 1.2)^2 = 1.
  // Token 1: both (2 - 3)^2 = 1. Loss = 0.5 * (1 + 1) / 2.
  const torch::Tensor v = T({1.0, 2.0}), old = T({0.0, 1.9}), ret = T({1.2, 3.0});
  const torch::Tensor mask = T({1, 1});
  EXPECT_NEAR(ClippedValueLoss(v, old, ret, mask, 0.2, 2.0).item<double>(), 0.5, 1e-6);
  EXPECT_NEAR(ClippedValueLoss(v, old, ret, mask, 0.0, 2.0).item<double>(), 0.26, 1e-6);
}

TEST(PreferenceLossTest, DpoAndIpo) {
  // Pair 0: h = (-1 + 1.5) - (-2 + 1.5) = 1; pair 1: h = -1. beta = 0.1.
  const torch::Tensor pc = torch::tensor({-1.0, -2.0}), pr = torch::tensor({-2.0, -1.0});
  const torch::Tensor rc = torch::tensor({-1.5, -1.5}), rr = torch::tensor({-1.5, -1.5});
  PreferenceLoss dpo =
      ComputePreferenceLoss(pc, pr, rc, rr, 0.1, v1::DpoConfig::SIGMOID, 2.0);
  // (log(1 + e^-0.1) + log(1 + e^0.1)) / 2
  EXPECT_NEAR(dpo.loss.item<double>(), (0.6443966600 + 0.7443966600) / 2, 1e-9);
  EXPECT_NEAR(dpo.margin_sum, 0.0, 1e-12);
  EXPECT_DOUBLE_EQ(dpo.ranked_right, 1.0);
  // beta * (pi_c - ref_c): 0.05 and -0.05; beta * (pi_r - ref_r): -0.05 and 0.05.
  EXPECT_NEAR(dpo.chosen_reward_sum, 0.0, 1e-12);
  PreferenceLoss ipo =
      ComputePreferenceLoss(pc, pr, rc, rr, 0.1, v1::DpoConfig::IPO, 2.0);
  // ((1 - 5)^2 + (-1 - 5)^2) / 2
  EXPECT_NEAR(ipo.loss.item<double>(), 26.0, 1e-9);
}

TEST(PreferenceLossTest, HandComputedGradientsTiesAndRewards) {
  // One pair, beta = 0.5: pi_c = -2, pi_r = -3, ref_c = -2.5, ref_r = -2.
  // h = 0.5 - (-1) = 1.5, beta * h = 0.75.
  //   DPO loss = log(1 + e^-0.75) = 0.3868710;
  //   d/d pi_c = -beta * sigmoid(-0.75) = -0.5 * 0.3208213 = -0.1604107.
  //   IPO loss = (1.5 - 1)^2 = 0.25; d/d pi_c = 2 * 0.5 = 1, d/d pi_r = -1.
  // Chosen reward 0.5 * 0.5 = 0.25, rejected reward 0.5 * -1 = -0.5.
  torch::Tensor pc = torch::tensor({-2.0}, torch::requires_grad());
  torch::Tensor pr = torch::tensor({-3.0}, torch::requires_grad());
  const torch::Tensor rc = torch::tensor({-2.5}), rr = torch::tensor({-2.0});
  PreferenceLoss dpo = ComputePreferenceLoss(pc, pr, rc, rr, 0.5, v1::DpoConfig::SIGMOID, 1.0);
  EXPECT_NEAR(dpo.loss.item<double>(), 0.3868710, 1e-6);
  dpo.loss.backward();
  EXPECT_NEAR(pc.grad().item<double>(), -0.1604107, 1e-6);
  EXPECT_NEAR(pr.grad().item<double>(), 0.1604107, 1e-6);
  EXPECT_NEAR(dpo.margin_sum, 0.75, 1e-12);
  EXPECT_NEAR(dpo.chosen_reward_sum, 0.25, 1e-12);
  EXPECT_NEAR(dpo.rejected_reward_sum, -0.5, 1e-12);
  EXPECT_DOUBLE_EQ(dpo.ranked_right, 1.0);

  pc.mutable_grad().zero_();
  pr.mutable_grad().zero_();
  PreferenceLoss ipo = ComputePreferenceLoss(pc, pr, rc, rr, 0.5, v1::DpoConfig::IPO, 1.0);
  EXPECT_NEAR(ipo.loss.item<double>(), 0.25, 1e-12);
  ipo.loss.backward();
  EXPECT_NEAR(pc.grad().item<double>(), 1.0, 1e-12);
  EXPECT_NEAR(pr.grad().item<double>(), -1.0, 1e-12);

  // Policy equal to the reference: margin 0, a tie, counted half;
  // DPO loss log 2, IPO loss (1 / (2 * 0.5))^2 = 1.
  const torch::Tensor same = torch::tensor({-1.0, -4.0});
  PreferenceLoss tie =
      ComputePreferenceLoss(same, same, same, same, 0.5, v1::DpoConfig::SIGMOID, 2.0);
  EXPECT_NEAR(tie.loss.item<double>(), std::log(2.0), 1e-12);
  EXPECT_DOUBLE_EQ(tie.ranked_right, 1.0);
  EXPECT_NEAR(ComputePreferenceLoss(same, same, same, same, 0.5, v1::DpoConfig::IPO, 2.0)
                  .loss.item<double>(),
              1.0, 1e-12);
}

TEST(PreferenceLossTest, MicroBatchesAddUpToTheFullBatch) {
  const torch::Tensor pc = torch::tensor({-1.0, -2.5, -0.5}), pr = torch::tensor({-2.0, -1.0, -3.0});
  const torch::Tensor rc = torch::tensor({-1.2, -2.0, -1.0}), rr = torch::tensor({-1.5, -1.5, -2.0});
  for (v1::DpoConfig::Loss kind : {v1::DpoConfig::SIGMOID, v1::DpoConfig::IPO}) {
    const double whole = ComputePreferenceLoss(pc, pr, rc, rr, 0.2, kind, 3.0).loss.item<double>();
    double parts = 0;
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 2}, {2, 3}}) {
      parts += ComputePreferenceLoss(pc.slice(0, b, e), pr.slice(0, b, e), rc.slice(0, b, e),
                                     rr.slice(0, b, e), 0.2, kind, 3.0)
                   .loss.item<double>();
    }
    EXPECT_NEAR(parts, whole, 1e-12);
  }
}

TEST(BaselineTest, RlooLeavesOneOut) {
  absl::StatusOr<std::vector<float>> a = RlooAdvantages({1, 0, 0, 3, 1, 2}, 3);
  ASSERT_TRUE(a.ok()) << a.status();
  // Group 0: 1 - 0, 0 - 0.5, 0 - 0.5. Group 1: 3 - 1.5, 1 - 2.5, 2 - 2.
  const std::vector<float> want = {1, -0.5, -0.5, 1.5, -1.5, 0};
  ASSERT_EQ(a->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ((*a)[i], want[i]) << i;
  EXPECT_EQ(RlooAdvantages({1, 2, 3}, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RlooAdvantages({1, 2}, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BaselineTest, ReinforcePlusPlusNormalizesOverTheWholeBatch) {
  // mean 2.5, population std sqrt(1.25).
  const std::vector<float> a = ReinforcePlusPlusAdvantages({1, 2, 3, 4}, 0.0);
  const double s = std::sqrt(1.25);
  const std::vector<double> want = {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a[i], want[i], 1e-6) << i;
}

TEST(ClipTest, DapoAsymmetricClip) {
  // Token 0: ratio 1.5, A = +1 -> -min(1.5, 1.28) = -1.28 (clip-high 0.28).
  // Token 1: ratio 0.5, A = -1 -> -min(-0.5, -0.8) = 0.8 (clip-low 0.2).
  const torch::Tensor logp = T({std::log(1.5f), std::log(0.5f)}, 2);
  const torch::Tensor old = T({0, 0}, 2);
  const torch::Tensor adv = torch::tensor({1.0f, -1.0f});
  const torch::Tensor mask = T({1, 1}, 2);
  PolicyLoss dapo = ClippedPolicyLoss(logp, old, torch::Tensor(), adv, mask, 0.2, 0.28, 0.0,
                                      v1::TOKEN_MEAN, 2.0);
  EXPECT_NEAR(dapo.loss.item<double>(), (-1.28 + 0.8) / 2, 1e-5);
  EXPECT_EQ(dapo.clipped_tokens, 2);
  PolicyLoss grpo = GrpoLoss(logp, old, torch::Tensor(), adv, mask, 0.2, 0.0, v1::TOKEN_MEAN,
                             2.0);
  EXPECT_NEAR(grpo.loss.item<double>(), (-1.2 + 0.8) / 2, 1e-5);
}

}  // namespace
}  // namespace trellis::learner
