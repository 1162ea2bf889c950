// On-policy distillation's objective (algorithm distill): the per-token
// divergence estimates against hand-computed values, their limits and
// their expectations under the student; the learner's step on them: its
// teacher_divergence, its advantages (the same update as a GRPO step given
// those advantages), and a batch without the teacher's log-probs refused.

#include <cmath>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learner/local_learner.h"
#include "learner/objectives.h"
#include "model/testing/small_model.h"

namespace trellis::learner {
namespace {

using ::testing::HasSubstr;
using Divergence = v1::DistillConfig::Divergence;

double Estimate(double s, double t, Divergence divergence, double beta = 0.5) {
  return TeacherDivergence(torch::tensor({s}, torch::kFloat64),
                           torch::tensor({t}, torch::kFloat64), divergence, beta)
      .item<double>();
}

TEST(TeacherDivergenceTest, ReverseKlIsTheLogRatio) {
  EXPECT_DOUBLE_EQ(Estimate(std::log(0.5), std::log(0.25), v1::DistillConfig::REVERSE_KL),
                   std::log(2.0));
  EXPECT_DOUBLE_EQ(Estimate(-3.0, -1.0, v1::DistillConfig::REVERSE_KL), -2.0);
}

// s = log 0.5, t = log 0.25: m = log(b/4 + (1 - b)/2).
TEST(TeacherDivergenceTest, JsdMatchesHandComputedValues) {
  const double s = std::log(0.5), t = std::log(0.25);
  // b = 0.5: m = log 0.375; 0.5 log(0.5/0.375) + 0.5 * 0.5 * log(0.25/0.375).
  EXPECT_NEAR(Estimate(s, t, v1::DistillConfig::JSD, 0.5), 0.0424747592, 1e-9);
  // b = 0.25: m = log 0.4375.
  EXPECT_NEAR(Estimate(s, t, v1::DistillConfig::JSD, 0.25), 0.0301965710, 1e-9);
}

TEST(TeacherDivergenceTest, JsdVanishesAtItsLimits) {
  // Teacher and student agree: no divergence, whatever the weight.
  for (double beta : {0.1, 0.5, 0.9}) {
    EXPECT_NEAR(Estimate(-1.3, -1.3, v1::DistillConfig::JSD, beta), 0.0, 1e-12) << beta;
  }
  // The mixture tends to the student (b -> 0) or the teacher (b -> 1): the
  // divergence to it tends to 0 in proportion.
  for (double beta : {1e-6, 1.0 - 1e-6}) {
    EXPECT_NEAR(Estimate(std::log(0.5), std::log(0.25), v1::DistillConfig::JSD, beta), 0.0, 1e-5)
        << beta;
  }
}

// Over a whole vocabulary, the estimates' mean under the student is the
// divergence itself.
TEST(TeacherDivergenceTest, TheEstimatesAreUnbiasedUnderTheStudent) {
  const std::vector<double> student = {0.5, 0.3, 0.15, 0.05};
  const std::vector<double> teacher = {0.1, 0.2, 0.3, 0.4};
  const double beta = 0.3;
  double reverse_kl = 0, jsd = 0, mean_kl = 0, mean_jsd = 0;
  for (size_t x = 0; x < student.size(); ++x) {
    const double ps = student[x], pt = teacher[x], pm = beta * pt + (1 - beta) * ps;
    reverse_kl += ps * std::log(ps / pt);
    jsd += beta * pt * std::log(pt / pm) + (1 - beta) * ps * std::log(ps / pm);
    const double s = std::log(ps), t = std::log(pt);
    mean_kl += ps * Estimate(s, t, v1::DistillConfig::REVERSE_KL);
    mean_jsd += ps * Estimate(s, t, v1::DistillConfig::JSD, beta);
  }
  EXPECT_NEAR(mean_kl, reverse_kl, 1e-12);
  EXPECT_NEAR(mean_jsd, jsd, 1e-12);
}

// The score-function gradient with TeacherCost, sum over x of
// S(x) cost(x) d log S(x) / dz, is the gradient of the exact divergence in
// the student's logits z (finite differences), for both divergences.
TEST(TeacherDivergenceTest, TheCostsScoreGradientIsTheDivergencesGradient) {
  const std::vector<double> logits = {0.4, -0.2, 1.1, 0.3};
  const std::vector<double> teacher = {0.1, 0.2, 0.3, 0.4};
  const double beta = 0.3;
  const auto student_of = [](std::vector<double> z) {
    double total = 0;
    for (double& v : z) total += (v = std::exp(v));
    for (double& v : z) v /= total;
    return z;
  };
  for (auto divergence : {v1::DistillConfig::REVERSE_KL, v1::DistillConfig::JSD}) {
    const auto exact = [&](const std::vector<double>& z) {
      const std::vector<double> ps = student_of(z);
      double value = 0;
      for (size_t x = 0; x < ps.size(); ++x) {
        const double pt = teacher[x], pm = beta * pt + (1 - beta) * ps[x];
        value += divergence == v1::DistillConfig::REVERSE_KL
                     ? ps[x] * std::log(ps[x] / pt)
                     : beta * pt * std::log(pt / pm) + (1 - beta) * ps[x] * std::log(ps[x] / pm);
      }
      return value;
    };
    const std::vector<double> ps = student_of(logits);
    std::vector<double> log_s, log_t;
    for (size_t x = 0; x < ps.size(); ++x) {
      log_s.push_back(std::log(ps[x]));
      log_t.push_back(std::log(teacher[x]));
    }
    const torch::Tensor cost =
        TeacherCost(torch::tensor(log_s, torch::kFloat64), torch::tensor(log_t, torch::kFloat64),
                    divergence, beta);
    for (size_t i = 0; i < logits.size(); ++i) {
      double score_gradient = 0;  // d log S(x) / dz_i = [x == i] - S(i)
      for (size_t x = 0; x < ps.size(); ++x) {
        score_gradient += ps[x] * cost[x].item<double>() * ((x == i ? 1.0 : 0.0) - ps[i]);
      }
      std::vector<double> up = logits, down = logits;
      up[i] += 1e-6;
      down[i] -= 1e-6;
      EXPECT_NEAR(score_gradient, (exact(up) - exact(down)) / 2e-6, 1e-6)
          << "logit " << i << ", divergence " << divergence;
    }
  }
}

// A sampled token the teacher all but rules out, or one the student all
// but never samples: finite estimates, as the same formula in float64 gives.
TEST(TeacherDivergenceTest, JsdIsFiniteAtTheExtremes) {
  const std::vector<float> s = {-30.0f, -0.01f, -25.0f}, t = {-0.01f, -300.0f, -29.0f};
  const torch::Tensor d =
      TeacherDivergence(torch::tensor(s), torch::tensor(t), v1::DistillConfig::JSD, 0.5);
  ASSERT_TRUE(torch::isfinite(d).all().item<bool>()) << d;
  for (size_t i = 0; i < s.size(); ++i) {
    const double want = Estimate(s[i], t[i], v1::DistillConfig::JSD, 0.5);
    EXPECT_NEAR(d[i].item<double>() / want, 1.0, 1e-4) << i;
  }
}

constexpr int kStudentVocab = 20;

v1::JobConfig PolicyJob(const std::string& algorithm) {
  v1::JobConfig job;
  *job.mutable_model() = model::testing::SmallConfig();
  job.set_algorithm(algorithm);
  job.mutable_grpo()->set_micro_batch_size(2);
  job.mutable_grpo()->set_kl_coef(0);
  return job;
}

// Three samples of 4, 5 and 6 tokens, the teacher's log-probs gaps[i]
// below the sampled ones on every token of sample i (a reverse KL estimate
// of gaps[i] per token).
v1::TrainBatch DivergenceBatch(const std::vector<float>& gaps) {
  v1::TrainBatch batch;
  for (int i = 0; i < 3; ++i) {
    v1::TrainSample* s = batch.add_samples();
    for (int k = 0; k < 3; ++k) s->add_prompt_tokens(3 + k + i);
    for (int k = 0; k < 4 + i; ++k) {
      s->add_response_tokens(5 + (k * 3 + i) % 14);
      s->add_old_logprobs(-2.5f + 0.1f * k);
      s->add_teacher_logprobs(-2.5f + 0.1f * k - gaps[i]);
    }
    s->set_advantage(0.5f - 0.5f * i);
  }
  return batch;
}

// Gaps whose mean over the batch's 15 tokens is (4 x 0.1 + 5 x 0.25 + 6 x
// 0.4) / 15 = 0.27.
const std::vector<float> kGaps = {0.1f, 0.25f, 0.4f};
constexpr double kMeanGap = 0.27;

absl::StatusOr<v1::TrainStats> LearnerStep(const v1::JobConfig& job, const v1::TrainBatch& batch) {
  LocalLearnerOptions options;
  options.vocab_size = kStudentVocab;
  options.seed = 7;
  auto learner = NewLocalLearner(job, options, nullptr, nullptr);
  if (!learner.ok()) return learner.status();
  return (*learner)->TrainStep(batch);
}

TEST(DistillObjectiveTest, ReportsTheMeanDivergenceAndNoKl) {
  absl::StatusOr<v1::TrainStats> stats = LearnerStep(PolicyJob("distill"), DivergenceBatch(kGaps));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_NEAR(stats->teacher_divergence(), kMeanGap, 1e-6);
  EXPECT_EQ(stats->trained_tokens(), 4 + 5 + 6);
  EXPECT_EQ(stats->kl(), 0);
}

// Each token's advantage is -divergence_weight x (its divergence - the
// batch's mean): here -2 x (gaps[i] - 0.27) on every token of sample i, the
// same update as GRPO's with those advantages per sample.
TEST(DistillObjectiveTest, TheDivergenceAboveTheMeanIsANegativeAdvantage) {
  v1::JobConfig distill = PolicyJob("distill");
  distill.mutable_distill()->set_divergence_weight(2);
  absl::StatusOr<v1::TrainStats> ours = LearnerStep(distill, DivergenceBatch(kGaps));
  v1::TrainBatch grpo_batch = DivergenceBatch(kGaps);
  for (int i = 0; i < 3; ++i) {
    grpo_batch.mutable_samples(i)->set_advantage(static_cast<float>(-2 * (kGaps[i] - kMeanGap)));
  }
  absl::StatusOr<v1::TrainStats> grpo = LearnerStep(PolicyJob("grpo"), grpo_batch);
  ASSERT_TRUE(ours.ok() && grpo.ok()) << ours.status() << grpo.status();
  EXPECT_NEAR(ours->loss(), grpo->loss(), 1e-6);
  EXPECT_NEAR(ours->grad_norm(), grpo->grad_norm(), 1e-5);
  EXPECT_GT(ours->grad_norm(), 0);
}

// The same divergence on every token is all baseline: no gradient.
TEST(DistillObjectiveTest, AUniformDivergenceTrainsNothing) {
  absl::StatusOr<v1::TrainStats> stats =
      LearnerStep(PolicyJob("distill"), DivergenceBatch({0.3f, 0.3f, 0.3f}));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_NEAR(stats->teacher_divergence(), 0.3, 1e-6);
  EXPECT_NEAR(stats->grad_norm(), 0, 1e-6);
}

// reward_weight alone: the samples' own advantages, as GRPO trains them.
TEST(DistillObjectiveTest, TheRewardWeightScalesTheSamplesAdvantages) {
  v1::JobConfig distill = PolicyJob("distill");
  distill.mutable_distill()->set_divergence_weight(0);
  distill.mutable_distill()->set_reward_weight(1);
  absl::StatusOr<v1::TrainStats> ours = LearnerStep(distill, DivergenceBatch(kGaps));
  absl::StatusOr<v1::TrainStats> grpo = LearnerStep(PolicyJob("grpo"), DivergenceBatch(kGaps));
  ASSERT_TRUE(ours.ok() && grpo.ok()) << ours.status() << grpo.status();
  EXPECT_NEAR(ours->loss(), grpo->loss(), 1e-6);
  EXPECT_NEAR(ours->grad_norm(), grpo->grad_norm(), 1e-6);
}

TEST(DistillObjectiveTest, ASampleWithoutTeacherLogProbsIsRefused) {
  v1::TrainBatch batch = DivergenceBatch(kGaps);
  batch.mutable_samples(1)->clear_teacher_logprobs();
  absl::StatusOr<v1::TrainStats> stats = LearnerStep(PolicyJob("distill"), batch);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(stats.status().message(),
              HasSubstr("train sample 1 has 5 response tokens and 0 teacher log-probs"));
}

}  // namespace
}  // namespace trellis::learner
