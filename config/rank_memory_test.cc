// One process's share of a split model (config/rank_memory.h): a learner
// rank under each memory.zero_stage, an actor rank of a tensor-parallel
// group, and memory.process_memory_limit_bytes refusing a job whose
// process is priced above it, naming the smallest learner count that fits.

#include "config/rank_memory.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::config {
namespace {

using ::testing::HasSubstr;

v1::JobConfig Job(const std::string& yaml) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml(yaml);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return v1::JobConfig();
  EXPECT_TRUE(ValidateJob(*job).ok()) << ValidateJob(*job);
  return *job;
}

// d 256, 4 layers, 8 heads of 32, 4 key/value heads, d_ff 1024, V 1000.
constexpr char kModel[] =
    "model: {d_model: 256, n_layers: 4, n_heads: 8, n_kv_heads: 4, d_ff: 1024, "
    "vocab_size: 1000}\n";

ModelShape Shape() { return ShapeOf(Job(kModel).model(), 0); }

LearnerState Whole(const ModelShape& s) {
  const double n = static_cast<double>(ParameterCount(s));
  return {4 * n, 4 * n, 8 * n, 0, 0, 0};  // float32, AdamW
}

TEST(RankMemory, UnitsAddUpToTheModel) {
  const ModelShape s = Shape();
  EXPECT_EQ(OuterParameters(s), 2 * 1000 * 256 + 256);
  // 2 norms, q and o (256 x 256), k and v (256 x 128), gate, up, down.
  EXPECT_EQ(BlockParameters(s), 2 * 256 + 2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 1024);
  EXPECT_EQ(ParameterCount(s), s.L * BlockParameters(s) + OuterParameters(s));
}

TEST(RankMemory, StageZeroKeepsEverythingWholeAtAnyCount) {
  const ModelShape s = Shape();
  const LearnerState whole = Whole(s);
  for (int ranks : {1, 2, 4}) {
    EXPECT_EQ(LearnerRank(whole, s, 4, 0, ranks).total(), whole.total()) << ranks;
  }
}

TEST(RankMemory, EachStageSplitsItsStateOverTheRanks) {
  const ModelShape s = Shape();
  const LearnerState whole = Whole(s);
  const double n = static_cast<double>(ParameterCount(s));
  const double block = static_cast<double>(BlockParameters(s));
  const double outer = static_cast<double>(OuterParameters(s));
  // A group of one trains as stage 0 does.
  for (int stage : {1, 2, 3}) {
    EXPECT_EQ(LearnerRank(whole, s, 4, stage, 1).total(), whole.total()) << stage;
  }
  for (int ranks : {2, 4}) {
    SCOPED_TRACE(ranks);
    const LearnerState one = LearnerRank(whole, s, 4, 1, ranks);
    EXPECT_EQ(one.parameters, 4 * n);
    EXPECT_EQ(one.gradients, 4 * n);
    EXPECT_EQ(one.optimizer_state, std::ceil(8 * n / ranks));
    const LearnerState two = LearnerRank(whole, s, 4, 2, ranks);
    EXPECT_EQ(two.parameters, 4 * n);
    EXPECT_EQ(two.gradients, std::ceil(4 * n / ranks));
    EXPECT_EQ(two.optimizer_state, std::ceil(8 * n / ranks));
    EXPECT_EQ(two.gathered, 0);
    // A block (983,552 parameters) is the largest unit here.
    EXPECT_DOUBLE_EQ(two.buckets, 4 * block);
    EXPECT_GT(block, outer);
    const LearnerState three = LearnerRank(whole, s, 4, 3, ranks);
    EXPECT_EQ(three.parameters, std::ceil(4 * n / ranks));
    EXPECT_DOUBLE_EQ(three.gathered, 4 * (2 * block + outer));
    // single / N + the gathered buffers + the gradient bucket.
    EXPECT_NEAR(three.total(), whole.total() / ranks + three.gathered + three.buckets, 4);
  }
  // bf16 weights: the gathered blocks are 2 B a parameter, the masters split.
  LearnerState bf16 = whole;
  bf16.parameters = 2 * n;
  bf16.master_weights = 4 * n;
  const LearnerState three = LearnerRank(bf16, s, 2, 3, 4);
  EXPECT_DOUBLE_EQ(three.gathered, 2 * (2 * block + outer));
  EXPECT_EQ(three.master_weights, std::ceil(n));
}

TEST(RankMemory, ATensorParallelRankHoldsItsSliceAndTheWholeOuterUnit) {
  const ModelShape s = Shape();
  const ModelShape half = TensorParallelShape(s, 2);
  EXPECT_EQ(half.H, 4);
  EXPECT_EQ(half.KV, 2);
  EXPECT_EQ(half.f, 512);
  const int64_t split = 2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 1024;
  EXPECT_EQ(ParameterCount(half), OuterParameters(s) + s.L * (2 * 256 + split / 2));
  EXPECT_DOUBLE_EQ(KvCacheBytes(half, 8, 100), KvCacheBytes(s, 8, 100) / 2);
}

TEST(RankMemory, ATensorParallelActorIsPricedAsItsOneProcess) {
  const std::string yaml = std::string(kModel) + "grpo: {prompts_per_step: 4, kl_coef: 0}\n";
  const std::vector<ProcessPrice> one = PriceProcesses(Job(yaml), ProcessLayout::kLaunched, 0);
  const std::vector<ProcessPrice> two = PriceProcesses(
      Job(yaml + "deployment: {actor: {tensor_parallel: 2}}"), ProcessLayout::kLaunched, 0);
  ASSERT_EQ(one.size(), 2u);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(one[1].process, "actor");
  EXPECT_EQ(two[1].process, "actor (2 tensor-parallel ranks on threads)");
  // The whole model and its KV cache stay beside the two ranks' slices.
  EXPECT_DOUBLE_EQ(two[1].bytes - one[1].bytes,
                   2 * 4 * static_cast<double>(ParameterCount(TensorParallelShape(Shape(), 2))));
}

// Under the resharding sync (memory.zero_stage 3) the ranks receive their
// slices in place: the process keeps no whole model beside them.
TEST(RankMemory, AnActorOfTheReshardingSyncHoldsOnlyItsRanksSlices) {
  const std::string yaml = std::string(kModel) + "grpo: {prompts_per_step: 4, kl_coef: 0}\n";
  const std::vector<ProcessPrice> whole = PriceProcesses(
      Job(yaml + "deployment: {actor: {tensor_parallel: 2}}"), ProcessLayout::kLaunched, 0);
  const std::vector<ProcessPrice> in_place =
      PriceProcesses(Job(yaml + "memory: {zero_stage: 3}\n"
                                "deployment: {actor: {tensor_parallel: 2}}"),
                     ProcessLayout::kLaunched, 0);
  ASSERT_EQ(whole.size(), 2u);
  ASSERT_EQ(in_place.size(), 2u);
  EXPECT_DOUBLE_EQ(whole[1].bytes - in_place[1].bytes,
                   4 * static_cast<double>(ParameterCount(Shape())));
}

// A stage-3 job whose one learner is over the limit fits over 4 ranks.
constexpr char kLimited[] =
    "model: {d_model: 1024, n_layers: 16, n_heads: 16, n_kv_heads: 8, d_ff: 4096, "
    "vocab_size: 1000}\n"
    "memory: {zero_stage: 3, process_memory_limit_bytes: 1300000000}\n";

TEST(ProcessMemoryLimit, RefusesOneLearnerWithTheNumbersAndTakesFour) {
  v1::JobConfig job = Job(kLimited);
  const double limit = 1.3e9;
  const auto learner = [&](int n) {
    return PriceProcesses(job, ProcessLayout::kLaunched, 0, n)[0].bytes;
  };
  ASSERT_GT(learner(1), limit);
  ASSERT_GT(learner(3), limit);
  ASSERT_LE(learner(4), limit);
  const absl::Status refused = CheckJobFitsMemory(job, int64_t{1} << 40);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("memory.process_memory_limit_bytes: learner (each of "
                                           "deployment.learner.count 1 ranks) needs at least"));
  EXPECT_THAT(refused.message(),
              HasSubstr(absl::StrCat(static_cast<int64_t>(learner(1)), " bytes")));
  EXPECT_THAT(refused.message(), HasSubstr("over the limit 1.21 GiB (1300000000 bytes)"));
  EXPECT_THAT(refused.message(), HasSubstr("the smallest deployment.learner.count that fits: 4"));

  job.mutable_deployment()->mutable_learner()->set_count(4);
  EXPECT_TRUE(CheckJobFitsMemory(job, int64_t{1} << 40).ok())
      << CheckJobFitsMemory(job, int64_t{1} << 40);
  // `trellis run` holds every role in one process, whole.
  const absl::Status embedded = CheckProcessMemoryLimit(job, ProcessLayout::kEmbedded);
  EXPECT_EQ(embedded.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(embedded.message(), HasSubstr("the one process of `trellis run` (every role)"));
  EXPECT_THAT(embedded.message(), HasSubstr("`trellis launch` gives each role"));
}

TEST(ProcessMemoryLimit, SaysWhenNoLearnerCountFits) {
  v1::JobConfig job = Job(kLimited);
  job.mutable_memory()->set_zero_stage(0);
  const absl::Status s = CheckJobFitsMemory(job, int64_t{1} << 40);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("no deployment.learner.count up to 4096 fits at "
                                     "memory.zero_stage 0 (a higher stage splits more)"));
  job.mutable_memory()->set_process_memory_limit_bytes(0);
  EXPECT_TRUE(CheckJobFitsMemory(job, int64_t{1} << 40).ok());
}

}  // namespace
}  // namespace trellis::config
