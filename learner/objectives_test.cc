#include "learner/objectives.h"

#include <cmath>

#include "gtest/gtest.h"

namespace trellis::learner {
namespace {

TEST(GrpoLossTest, MatchesHandComputedValues) {
  // Two sequences; the second has one response token (mask 0 on the pad).
  const torch::Tensor logp = torch::tensor({{-1.0f, -2.0f}, {-0.5f, 0.0f}});
  const torch::Tensor old_logp = torch::tensor({{-1.5f, -2.0f}, {-0.2f, 0.0f}});
  const torch::Tensor ref_logp = torch::tensor({{-1.0f, -1.0f}, {-0.5f, 0.0f}});
  const torch::Tensor adv = torch::tensor({1.0f, -2.0f});
  const torch::Tensor mask = torch::tensor({{1.0f, 1.0f}, {1.0f, 0.0f}});
  const double clip = 0.2, beta = 0.1;

  // Token (0,0): ratio e^0.5 = 1.6487 > 1.2, A = 1 -> pg = -min(1.6487, 1.2) = -1.2
  // Token (0,1): ratio 1 -> pg = -1; kl: delta = 1 -> e - 2 = 0.7182818
  // Token (1,0): ratio e^-0.3 = 0.7408, A = -2 -> -min(-1.4816, -1.6) = 1.6
  const double pg00 = -1.2, pg01 = -1.0, pg10 = 1.6;
  const double kl01 = std::exp(1.0) - 2.0;
  const double token_sum = pg00 + pg01 + beta * kl01 + pg10;

  PolicyLoss tm = GrpoLoss(logp, old_logp, ref_logp, adv, mask, clip, beta,
                           v1::TOKEN_MEAN, LossNormalizer(v1::TOKEN_MEAN, 3, 2));
  EXPECT_NEAR(tm.loss.item<double>(), token_sum / 3, 1e-6);
  EXPECT_NEAR(tm.kl_sum, kl01, 1e-6);
  EXPECT_EQ(tm.tokens, 3);
  EXPECT_EQ(tm.clipped_tokens, 2);  // (0,0) and (1,0) take the clipped branch

  PolicyLoss sm = GrpoLoss(logp, old_logp, ref_logp, adv, mask, clip, beta,
                           v1::SEQUENCE_MEAN, LossNormalizer(v1::SEQUENCE_MEAN, 3, 2));
  const double seq0 = (pg00 + pg01 + beta * kl01) / 2, seq1 = pg10 / 1;
  EXPECT_NEAR(sm.loss.item<double>(), (seq0 + seq1) / 2, 1e-6);
}

TEST(ClippedPolicyLossTest, AsymmetricClipInAllFourCases) {
  // DAPO clip-higher: ratio clipped to [1 - 0.2, 1 + 0.28] = [0.8, 1.28].
  //   token  ratio  A    unclipped  clipped       -min
  //   0      1.5    +1   1.5        1.28          -1.28  (clip-high binds)
  //   1      0.5    +1   0.5        0.8           -0.5   (below: min keeps 0.5)
  //   2      0.5    -1   -0.5       -0.8          0.8    (clip-low binds)
  //   3      1.5    -1   -1.5       -1.28         1.5    (above: min keeps -1.5)
  // Symmetric 0.2 would give -1.2 for token 0 and the same for the others.
  // Advantages are per sequence: four one-token rows.
  const torch::Tensor lp =
      torch::tensor({std::log(1.5f), std::log(0.5f), std::log(0.5f), std::log(1.5f)})
          .reshape({4, 1});
  const torch::Tensor old = torch::zeros({4, 1});
  const torch::Tensor m = torch::ones({4, 1});
  const torch::Tensor adv = torch::tensor({1.0f, 1.0f, -1.0f, -1.0f});
  PolicyLoss dapo = ClippedPolicyLoss(lp, old, torch::Tensor(), adv, m, 0.2, 0.28, 0.0,
                                      v1::TOKEN_MEAN, 4.0);
  EXPECT_NEAR(dapo.loss.item<double>(), (-1.28 - 0.5 + 0.8 + 1.5) / 4, 1e-5);
  EXPECT_EQ(dapo.clipped_tokens, 2);  // tokens 0 and 2
  PolicyLoss grpo = GrpoLoss(lp, old, torch::Tensor(), adv, m, 0.2, 0.0, v1::TOKEN_MEAN, 4.0);
  EXPECT_NEAR(grpo.loss.item<double>(), (-1.2 - 0.5 + 0.8 + 1.5) / 4, 1e-5);
  // The gradient through a clipped token is zero: d/dlogp of token 0 vanishes
  // under clip-high 0.28 (ratio 1.5 > 1.28) but not under clip-high 0.6.
  torch::Tensor x = lp.clone().requires_grad_(true);
  ClippedPolicyLoss(x, old, torch::Tensor(), adv, m, 0.2, 0.28, 0.0, v1::TOKEN_MEAN, 4.0)
      .loss.backward();
  EXPECT_EQ(x.grad()[0][0].item<float>(), 0.0f);
  torch::Tensor y = lp.clone().requires_grad_(true);
  ClippedPolicyLoss(y, old, torch::Tensor(), adv, m, 0.2, 0.6, 0.0, v1::TOKEN_MEAN, 4.0)
      .loss.backward();
  // d(-ratio * A / 4)/dlogp = -ratio / 4 = -0.375.
  EXPECT_NEAR(y.grad()[0][0].item<float>(), -0.375f, 1e-6);
}

TEST(GrpoLossTest, KlIsZeroWhenPolicyEqualsReference) {
  const torch::Tensor logp = torch::tensor({{-0.7f, -0.1f}});
  const torch::Tensor mask = torch::ones({1, 2});
  PolicyLoss loss = GrpoLoss(logp, logp, logp, torch::tensor({0.0f}), mask, 0.2, 1.0,
                             v1::TOKEN_MEAN, 2);
  EXPECT_NEAR(loss.loss.item<double>(), 0.0, 1e-7);
  EXPECT_NEAR(loss.kl_sum, 0.0, 1e-7);
}

TEST(DecoupledWeightsTest, TruncatedImportanceWeightsAgainstTheProximalPolicy) {
  // Token (0,0): behaviour = proximal -> w = 1; (0,1): proximal - behaviour
  // = log 1.5 -> w = 1.5; (1,0): log 3 -> truncated to the cap 2; (1,1) is
  // padding.
  const torch::Tensor logp = torch::tensor({{-1.0f, -2.0f}, {-0.5f, -9.0f}}).requires_grad_(true);
  const torch::Tensor behaviour =
      torch::tensor({{-1.0f, -2.0f - std::log(1.5f)}, {-0.5f - std::log(3.0f), 0.0f}});
  const torch::Tensor mask = torch::tensor({{1.0f, 1.0f}, {1.0f, 0.0f}});
  DecoupledTerms d = DecoupledWeights(logp, behaviour, mask, 2.0);
  EXPECT_FALSE(d.proximal.requires_grad());
  EXPECT_NEAR(d.weights[0][0].item<double>(), 1.0, 1e-6);
  EXPECT_NEAR(d.weights[0][1].item<double>(), 1.5, 1e-5);
  EXPECT_NEAR(d.weights[1][0].item<double>(), 2.0, 1e-6);
  EXPECT_NEAR(d.gap_sum, std::log(1.5) + std::log(3.0), 1e-5);
  EXPECT_EQ(d.truncated_tokens, 1);

  // Against the proximal policy the ratio is 1 (nothing clipped) and the
  // loss is -sum(w * A) / tokens, its gradient w * A per token.
  const torch::Tensor adv = torch::tensor({1.0f, -1.0f});
  PolicyLoss loss = ClippedPolicyLoss(logp, d.proximal, torch::Tensor(), adv, mask, 0.2, 0.2, 0,
                                      v1::TOKEN_MEAN, 3, d.weights);
  EXPECT_NEAR(loss.loss.item<double>(), -(1.0 + 1.5 - 2.0) / 3, 1e-5);
  EXPECT_EQ(loss.clipped_tokens, 0);
  loss.loss.backward();
  EXPECT_NEAR(logp.grad()[0][1].item<double>(), -1.5 / 3, 1e-5);
  EXPECT_NEAR(logp.grad()[1][0].item<double>(), 2.0 / 3, 1e-5);
  EXPECT_EQ(logp.grad()[1][1].item<double>(), 0);
}

TEST(SftLossTest, IsTokenMeanNegativeLogLikelihood) {
  const torch::Tensor logp = torch::tensor({{-1.0f, -3.0f}, {-2.0f, -9.0f}});
  const torch::Tensor mask = torch::tensor({{1.0f, 1.0f}, {1.0f, 0.0f}});
  EXPECT_NEAR(SftLoss(logp, mask, 3).item<double>(), 2.0, 1e-6);
}

}  // namespace
}  // namespace trellis::learner
