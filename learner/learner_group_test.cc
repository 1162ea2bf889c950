// A data-parallel group of learners (job.memory.zero_stage) as threads of
// one process against a single learner.

#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "comm/tcp_store.h"
#include "gtest/gtest.h"
#include "learner/local_learner.h"
#include "learner/testing/small_job.h"
#include "ledger/ledger.h"
#include "model/safetensors.h"

namespace trellis::learner {
namespace {

// A data-parallel group of `ranks` learners as threads of this process,
// each running `steps` TrainSteps on the same batches.
struct GroupRun {
  std::vector<std::vector<v1::TrainStats>> stats;      // [rank][step]
  std::vector<model::NamedTensors> weights;            // [rank], after the steps
  std::vector<std::map<std::string, int64_t>> ledger;  // [rank]: last bytes by object
};

// Each rank then saves a checkpoint into dir/ckpt<ranks> and, once every
// rank has, restores it.
GroupRun RunGroup(const v1::JobConfig& job, int ranks, const std::vector<v1::TrainBatch>& batches,
                  const std::string& dir) {
  const std::string checkpoint = dir + "/ckpt" + std::to_string(ranks);
  std::filesystem::create_directories(checkpoint);
  std::atomic<int> saved{0};
  absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
  EXPECT_TRUE(port.ok()) << port.status();
  GroupRun run;
  run.stats.resize(ranks);
  run.weights.resize(ranks);
  run.ledger.resize(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ledger::Ledger ledger;
      ledger.ForwardRecords([&run, r](std::string_view, const ledger::ForwardedRecord& record) {
        if (const auto* o = std::get_if<ledger::ForwardedObject>(&record)) {
          run.ledger[r][std::string(ledger::ObjectName(o->object))] = o->bytes;
        }
      });
      LocalLearnerOptions options;
      options.worker_id = "learner-" + std::to_string(r);
      options.vocab_size = kVocab;
      options.group = {r, ranks, "127.0.0.1", *port, ""};
      auto learner = NewLocalLearner(job, options, /*transport=*/nullptr, &ledger);
      ASSERT_TRUE(learner.ok()) << learner.status();
      for (const v1::TrainBatch& batch : batches) {
        auto stats = (*learner)->TrainStep(batch);
        ASSERT_TRUE(stats.ok()) << stats.status();
        run.stats[r].push_back(*stats);
      }
      const std::string path = dir + "/rank" + std::to_string(r) + ".safetensors";
      ASSERT_TRUE((*learner)->SaveWeights(path).ok());
      auto weights = model::LoadSafetensors(path);
      ASSERT_TRUE(weights.ok()) << weights.status();
      run.weights[r] = *std::move(weights);
      ASSERT_TRUE((*learner)->SaveCheckpoint(checkpoint).ok());
      ++saved;
      while (saved.load() < ranks) std::this_thread::yield();
      absl::Status restored = (*learner)->RestoreCheckpoint(checkpoint);
      EXPECT_TRUE(restored.ok()) << restored;
    });
  }
  for (auto& t : threads) t.join();
  return run;
}

double MaxAbsDiff(const model::NamedTensors& a, const model::NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    diff = std::max(diff, (a[i].second - b[i].second).abs().max().item<double>());
  }
  return diff;
}

// Two ranks, each training on its half of every batch, take the single
// learner's steps: the same stats and weights (to float rounding), with
// the optimizer state split between them under ZeRO-1 and whole on each
// without it.
class LearnerGroupTest : public testing::TestWithParam<int> {};

TEST_P(LearnerGroupTest, TwoRanksMatchOneLearner) {
  const int zero_stage = GetParam();
  const std::string dir = ::testing::TempDir() + "/learner_group_" + std::to_string(zero_stage);
  std::filesystem::create_directories(dir);
  v1::JobConfig job = SmallJob(2, v1::TOKEN_MEAN);
  job.mutable_memory()->set_zero_stage(zero_stage);
  job.mutable_grpo()->mutable_optimizer()->set_warmup_steps(0);
  // Several buckets per collective.
  job.mutable_deployment()->set_bucket_bytes(16 << 10);
  // Threads share LibTorch's generator: every learner starts from one file.
  ASSERT_TRUE(MakeLearner(job)->SaveWeights(dir + "/init.safetensors").ok());
  job.mutable_model()->set_init_checkpoint(dir + "/init.safetensors");
  std::vector<v1::TrainBatch> batches;
  for (int step = 0; step < 4; ++step) batches.push_back(RandomBatch(7, 40 + step));

  const GroupRun one = RunGroup(job, 1, batches, dir);
  const GroupRun two = RunGroup(job, 2, batches, dir);
  ASSERT_EQ(two.stats[0].size(), batches.size());
  for (size_t step = 0; step < batches.size(); ++step) {
    const v1::TrainStats& want = one.stats[0][step];
    const v1::TrainStats& got = two.stats[0][step];
    EXPECT_NEAR(got.loss(), want.loss(), 1e-5) << "step " << step;
    EXPECT_NEAR(got.grad_norm(), want.grad_norm(), 1e-5 * want.grad_norm()) << "step " << step;
    EXPECT_NEAR(got.kl(), want.kl(), 1e-6) << "step " << step;
    EXPECT_EQ(got.trained_tokens(), want.trained_tokens()) << "step " << step;
    EXPECT_EQ(want.communication_bytes(), 0);
    for (int r = 0; r < 2; ++r) {
      // Gradients all-reduced, and with ZeRO-1 parameters broadcast too.
      const int64_t moved = two.stats[r][step].communication_bytes();
      EXPECT_GE(moved, (zero_stage == 1 ? 2 : 1) * want.parameter_bytes()) << "rank " << r;
      EXPECT_GT(two.stats[r][step].communication_seconds(), 0);
    }
  }
  const double diff = MaxAbsDiff(two.weights[0], one.weights[0]);
  EXPECT_LT(diff, 1e-5);
  RecordProperty("max_abs_weight_diff", absl::StrCat(diff));
  RecordProperty("communication_bytes_per_step",
                 std::to_string(two.stats[0].back().communication_bytes()));
  RecordProperty("communication_seconds_per_step",
                 absl::StrCat(two.stats[0].back().communication_seconds()));
  EXPECT_EQ(MaxAbsDiff(two.weights[1], two.weights[0]), 0) << "the ranks' weights differ";

  const int64_t whole = one.stats[0].back().optimizer_state_bytes();
  const int64_t rank0 = two.stats[0].back().optimizer_state_bytes();
  const int64_t rank1 = two.stats[1].back().optimizer_state_bytes();
  RecordProperty("optimizer_state_bytes",
                 absl::StrCat(whole, " one rank; ", rank0, " + ", rank1, " two ranks"));
  if (zero_stage == 1) {
    EXPECT_EQ(rank0 + rank1, whole);
    EXPECT_NEAR(rank0, whole / 2, whole / 10);
  } else {
    EXPECT_EQ(rank0, whole);
    EXPECT_EQ(rank1, whole);
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(two.ledger[r].at("optimizer_state"), r == 0 ? rank0 : rank1);
    EXPECT_GT(two.ledger[r].at("communication"), 0);
    EXPECT_LE(two.ledger[r].at("communication"), 16 << 10);
  }
  EXPECT_EQ(one.ledger[0].count("communication"), 0u);

  // Rank 1 wrote its own optimizer file; one learner cannot take them up.
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt2/optimizer.rank1.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt1/optimizer.rank1.safetensors"));
  absl::Status refused = MakeLearner(job)->RestoreCheckpoint(dir + "/ckpt2");
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(std::string(refused.message()).find("learner_ranks 2 but this learner has 1"),
            std::string::npos)
      << refused;
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, LearnerGroupTest, testing::Values(0, 1),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

}  // namespace
}  // namespace trellis::learner
