// `trellis plan` per launched process (tools/plan_ranks.h), from given
// rates and lengths: a learner rank's model state under memory.zero_stage
// 0-3 with 1, 2 and 4 ranks, an actor rank of a tensor-parallel pair, the
// smallest learner count that fits a GPU, and memory.process_memory_limit_bytes
// refusing one learner with the plan's numbers and taking four.

#include "tools/plan_ranks.h"

#include <cmath>
#include <sstream>
#include <string>

#include "config/rank_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "run/embedded_job.h"
#include "tools/plan_device.h"
#include "tools/testing/test_plan.h"

namespace trellis::tools {
namespace {

using ::testing::HasSubstr;

constexpr char kLearner[] = "learner-0";

v1::JobConfig Job(int zero_stage, int learners) {
  absl::StatusOr<v1::JobConfig> job = run::DefaultJob();
  EXPECT_TRUE(job.ok()) << job.status();
  job->mutable_memory()->set_zero_stage(zero_stage);
  job->mutable_deployment()->mutable_learner()->set_count(learners);
  return *job;
}


int64_t Line(const std::vector<PlanLine>& lines, const std::string& object) {
  int64_t bytes = 0;
  for (const PlanLine& l : lines) bytes += l.object == object ? l.bytes : 0;
  return bytes;
}

std::vector<PlanLine> Update(const Plan& plan) {
  for (const PlanStage& st : plan.stages) {
    if (st.stage == "update") return st.transient;
  }
  ADD_FAILURE() << "no update stage";
  return {};
}

// The learner's weights, gradients and optimizer state as one learner
// holds them (float32, AdamW: 4 + 4 + 8 bytes a parameter).
int64_t ModelState(const std::vector<PlanLine>& lines) {
  return Line(lines, "parameters") + Line(lines, "gradients") + Line(lines, "optimizer_state");
}

TEST(PlanRanksTest, EachStageSplitsTheLearnersStateOverItsRanks) {
  const Plan single = testing::TestPlan(Job(0, 1));
  std::vector<PlanLine> whole;
  for (const PlanLine& l : single.resident) {
    if (l.role == kLearner) whole.push_back(l);
  }
  const int64_t params = Line(whole, "parameters"), grads = Line(whole, "gradients");
  const int64_t state = ModelState(whole);
  const int64_t staged = Line(whole, "communication");  // the version for the actor
  const config::ModelShape& s = single.shape;
  const int64_t gathered = 4 * (2 * config::BlockParameters(s) + config::OuterParameters(s));
  const int64_t bucket = static_cast<int64_t>(std::ceil(
      static_cast<double>(grads) *
      std::max(config::BlockParameters(s), config::OuterParameters(s)) /
      config::ParameterCount(s)));
  for (int n : {1, 2, 4}) {
    SCOPED_TRACE(n);
    for (int stage : {0, 1, 2, 3}) {
      SCOPED_TRACE(stage);
      const v1::JobConfig job = Job(stage, n);
      const RankPlan rank = PlanRank(testing::TestPlan(job), job, kLearner, n);
      const int64_t split = ModelState(rank.resident);
      if (n == 1 || stage == 0) {
        EXPECT_EQ(split, state);
        EXPECT_EQ(Line(rank.resident, "communication"), staged);
        continue;
      }
      const int64_t optimizer = Line(whole, "optimizer_state");
      EXPECT_NEAR(Line(rank.resident, "optimizer_state"), optimizer / n, 1);
      if (stage == 1) EXPECT_EQ(split, params + grads + (optimizer + n - 1) / n);
      // Each rank stages its share of the new version for the actors (the
      // resharding sync).
      if (stage == 2) {
        EXPECT_NEAR(split, params + (grads + optimizer) / n, 2);
        EXPECT_EQ(Line(rank.resident, "communication"), (staged + n - 1) / n + bucket);
      }
      if (stage == 3) {
        // single / N + the gathered buffers (two blocks and the outer unit).
        EXPECT_NEAR(split, state / n + gathered, 3);
        EXPECT_EQ(Line(rank.resident, "communication"), (staged + n - 1) / n + bucket);
      }
      if (stage == 1) EXPECT_EQ(Line(rank.resident, "communication"), staged);
      // The rank trains its own micro-batches: the update's activations whole.
      EXPECT_EQ(rank.peak_stage, "update");
      EXPECT_EQ(Line(rank.peak_transient, "activations"), Line(Update(single), "activations"));
    }
  }
}

// A replica's ranks are threads of one process that keeps its whole model
// (the receive buffer) beside their slices, and one KV cache.
TEST(PlanRanksTest, ATensorParallelActorHoldsItsModelTheSlicesAndOneCache) {
  v1::JobConfig job = Job(0, 1);
  job.mutable_deployment()->mutable_actor()->set_tensor_parallel(2);
  const Plan plan = testing::TestPlan(job);
  const RankPlan whole = PlanRank(plan, Job(0, 1), "actor-0", 1);
  const RankPlan two = PlanRank(plan, job, "actor-0", 1);
  EXPECT_EQ(two.process, "actor-0 (2 tensor-parallel ranks on threads)");
  const config::ModelShape slice = config::TensorParallelShape(plan.shape, 2);
  EXPECT_EQ(Line(two.resident, "parameters"),
            Line(whole.resident, "parameters") + 2 * 4 * config::ParameterCount(slice));
  ASSERT_EQ(two.peak_stage, whole.peak_stage);
  EXPECT_EQ(Line(two.peak_transient, "kv_cache"), Line(whole.peak_transient, "kv_cache"));
}

// A launched stage-3 job syncs through the resharding sync: each learner
// rank stages only its share of the version, and a tensor-parallel actor
// keeps only its ranks' slices.
TEST(PlanRanksTest, UnderTheReshardingSyncRanksHoldTheirSharesOfTheVersion) {
  v1::JobConfig job = Job(3, 4);
  job.mutable_deployment()->mutable_actor()->set_tensor_parallel(2);
  ASSERT_TRUE(config::ReshardsWeights(job));
  const Plan plan = testing::TestPlan(job);
  const int64_t staged = Line(plan.resident, "communication");
  ASSERT_GT(staged, 0);
  const RankPlan rank = PlanRank(plan, job, kLearner, 4);
  int64_t shares = 0;
  for (const PlanLine& l : rank.resident) {
    if (l.formula.find("each stages its own shards") != std::string::npos) shares += l.bytes;
  }
  EXPECT_EQ(shares, (staged + 3) / 4);
  const config::ModelShape slice = config::TensorParallelShape(plan.shape, 2);
  EXPECT_EQ(Line(PlanRank(plan, job, "actor-0", 4).resident, "parameters"),
            2 * 4 * config::ParameterCount(slice));
}

TEST(PlanRanksTest, TheDevicePlanSaysTheSmallestLearnerCountThatFits) {
  const v1::JobConfig job = [] {
    v1::JobConfig j = Job(3, 1);
    j.mutable_runtime()->set_device(v1::RuntimeConfig::CUDA);
    return j;
  }();
  const Plan plan = testing::TestPlan(job);
  const int64_t four = PlanRank(plan, job, kLearner, 4).peak_bytes;
  ASSERT_GT(PlanRank(plan, job, kLearner, 3).peak_bytes, four);
  const DevicePlan device = PlanDevices(plan, job, four, "the test");
  EXPECT_EQ(device.smallest_learner_count, 4);
  std::ostringstream out;
  PrintDevicePlan(device, out);
  EXPECT_THAT(out.str(), HasSubstr("smallest learner count that fits: 4\n"));
}

TEST(PlanRanksTest, ALimitRefusesOneLearnerWithThePlansNumbersAndTakesFour) {
  v1::JobConfig job = Job(3, 1);
  job.mutable_deployment()->mutable_actor()->set_tensor_parallel(2);
  const Plan plan = testing::TestPlan(job);
  const int64_t limit = PlanRank(plan, job, kLearner, 4).peak_bytes;
  const int64_t one = PlanRank(plan, job, kLearner, 1).peak_bytes;
  ASSERT_GT(PlanRank(plan, job, kLearner, 3).peak_bytes, limit);
  ASSERT_LE(PlanRank(plan, job, "actor-0", 1).peak_bytes, limit);
  job.mutable_memory()->set_process_memory_limit_bytes(limit);

  const ProcessPlan refused = PlanProcesses(plan, job);
  EXPECT_EQ(refused.smallest_learner_count, 4);
  const absl::Status s = CheckProcessPlan(refused);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("memory.process_memory_limit_bytes: learner-0 "
                                                  "peaks at ")));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("(", one, " bytes, at update) by the plan, "
                                                  "over the limit ")));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("(", limit, " bytes); the smallest "
                                                  "deployment.learner.count that fits: 4")));
  std::ostringstream out;
  PrintProcessPlan(refused, out);
  EXPECT_THAT(out.str(), HasSubstr("-- learner-0: peak "));
  EXPECT_THAT(out.str(), HasSubstr("at update, OVER THE LIMIT --"));
  EXPECT_THAT(out.str(), HasSubstr("smallest learner count that fits the limit: 4\n"));

  job.mutable_deployment()->mutable_learner()->set_count(4);
  const ProcessPlan taken = PlanProcesses(testing::TestPlan(job), job);
  EXPECT_TRUE(CheckProcessPlan(taken).ok()) << CheckProcessPlan(taken);
  std::ostringstream four;
  PrintProcessPlan(taken, four);
  EXPECT_THAT(four.str(),
              HasSubstr("-- learner-0 (one of 4 ranks, memory.zero_stage 3): peak "));
  // `trellis run` holds every role whole in one process: over the limit.
  EXPECT_THAT(four.str(), HasSubstr("`trellis run` (one process, every role whole): peak "));
  EXPECT_THAT(four.str(), HasSubstr(", OVER THE LIMIT\n"));
}

}  // namespace
}  // namespace trellis::tools
