// A data-parallel group of learners (job.memory.zero_stage) as threads of
// one process against a single learner.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
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
  std::vector<std::map<std::string, int64_t>> peak;    // [rank]: largest bytes by object
};

// Each rank first restores checkpoint `restore` (when set), then trains,
// then saves a checkpoint into dir/ckpt<ranks><tag> and, once every rank
// has, restores it. The weights are each rank's SaveWeights (under flat
// shards rank 0 alone writes them: the others' are empty).
GroupRun RunGroup(const v1::JobConfig& job, int ranks, const std::vector<v1::TrainBatch>& batches,
                  const std::string& dir, const std::string& restore = "",
                  const std::string& tag = "") {
  const std::string checkpoint = dir + "/ckpt" + std::to_string(ranks) + tag;
  std::filesystem::create_directories(checkpoint);
  std::atomic<int> saved{0};
  absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
  EXPECT_TRUE(port.ok()) << port.status();
  GroupRun run;
  run.stats.resize(ranks);
  run.weights.resize(ranks);
  run.ledger.resize(ranks);
  run.peak.resize(ranks);
  std::vector<std::jthread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ledger::Ledger ledger;
      ledger.ForwardRecords([&run, r](std::string_view, const ledger::ForwardedRecord& record) {
        if (const auto* o = std::get_if<ledger::ForwardedObject>(&record)) {
          const std::string name(ledger::ObjectName(o->object));
          run.ledger[r][name] = o->bytes;
          run.peak[r][name] = std::max(run.peak[r][name], o->bytes);
        }
      });
      LocalLearnerOptions options;
      options.worker_id = "learner-" + std::to_string(r);
      options.vocab_size = kVocab;
      options.group = {r, ranks, "127.0.0.1", *port, ""};
      auto learner = NewLocalLearner(job, options, /*transport=*/nullptr, &ledger);
      ASSERT_TRUE(learner.ok()) << learner.status();
      if (!restore.empty()) {
        absl::Status restored = (*learner)->RestoreCheckpoint(restore);
        ASSERT_TRUE(restored.ok()) << restored;
      }
      for (const v1::TrainBatch& batch : batches) {
        auto stats = (*learner)->TrainStep(batch);
        ASSERT_TRUE(stats.ok()) << stats.status();
        run.stats[r].push_back(*stats);
      }
      const std::string path = dir + "/rank" + std::to_string(r) + tag + ".safetensors";
      std::filesystem::remove(path);
      ASSERT_TRUE((*learner)->SaveWeights(path).ok());
      if (std::filesystem::exists(path)) {
        auto weights = model::LoadSafetensors(path);
        ASSERT_TRUE(weights.ok()) << weights.status();
        run.weights[r] = *std::move(weights);
      }
      ASSERT_TRUE((*learner)->SaveCheckpoint(checkpoint).ok());
      ++saved;
      while (saved.load() < ranks) std::this_thread::yield();
      absl::Status restored = (*learner)->RestoreCheckpoint(checkpoint);
      EXPECT_TRUE(restored.ok()) << restored;
    });
  }
  threads.clear();
  return run;
}

// The largest difference between same-named tensors (a sharded learner
// writes its units' tensors in their units' order).
double MaxAbsDiff(const model::NamedTensors& a, const model::NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  const std::map<std::string, torch::Tensor> by_name(b.begin(), b.end());
  double diff = 0;
  for (const auto& [name, tensor] : a) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      ADD_FAILURE() << name << " is missing";
      continue;
    }
    diff = std::max(diff, (tensor - it->second).abs().max().item<double>());
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

// Bytes of the model's state a rank holds at its peak: its parameters (its
// shards), their gradients, optimizer state and fp32 masters.
int64_t ModelState(const std::map<std::string, int64_t>& peak) {
  int64_t total = 0;
  for (const char* object : {"parameters", "gradients", "optimizer_state", "master_weights"}) {
    if (auto it = peak.find(object); it != peak.end()) total += it->second;
  }
  return total;
}

// memory.zero_stage 2 and 3 with 2 and 4 ranks (flat_shards.h) take the
// single learner's steps; each rank holds 1/N of the model's state, and
// stage 3 gathers at most the outer unit and two blocks at once. A
// checkpoint resumes bit for bit on as many ranks and on half as many.
class ShardedLearnerTest : public testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(ShardedLearnerTest, MatchesOneLearner) {
  const auto [zero_stage, ranks] = GetParam();
  const std::string dir = ::testing::TempDir() + "/sharded_" + std::to_string(zero_stage) + "_" +
                          std::to_string(ranks);
  std::filesystem::create_directories(dir);
  v1::JobConfig job = SmallJob(2, v1::TOKEN_MEAN);
  job.mutable_model()->set_n_layers(4);
  job.mutable_grpo()->mutable_optimizer()->set_warmup_steps(0);
  job.mutable_deployment()->set_call_timeout_ms(60000);
  ASSERT_TRUE(MakeLearner(job)->SaveWeights(dir + "/init.safetensors").ok());
  job.mutable_model()->set_init_checkpoint(dir + "/init.safetensors");
  std::vector<v1::TrainBatch> batches;
  for (int step = 0; step < 4; ++step) batches.push_back(RandomBatch(7, 40 + step));

  const GroupRun one = RunGroup(job, 1, batches, dir);
  job.mutable_memory()->set_zero_stage(zero_stage);
  const GroupRun group = RunGroup(job, ranks, batches, dir);
  ASSERT_EQ(group.stats[0].size(), batches.size());
  double loss_diff = 0;
  for (size_t step = 0; step < batches.size(); ++step) {
    const v1::TrainStats& want = one.stats[0][step];
    const v1::TrainStats& got = group.stats[0][step];
    loss_diff = std::max(loss_diff, std::abs(got.loss() - want.loss()) / std::abs(want.loss()));
    EXPECT_NEAR(got.grad_norm(), want.grad_norm(), 1e-5 * want.grad_norm()) << "step " << step;
    EXPECT_EQ(got.trained_tokens(), want.trained_tokens()) << "step " << step;
  }
  EXPECT_LT(loss_diff, 1e-5);
  const double diff = MaxAbsDiff(group.weights[0], one.weights[0]);
  EXPECT_LT(diff, 1e-5);
  RecordProperty("max_relative_loss_diff", absl::StrCat(loss_diff));
  RecordProperty("max_abs_weight_diff", absl::StrCat(diff));

  // Each rank's share of the single learner's state, padding aside.
  const int64_t whole = ModelState(one.peak[0]);
  const int64_t unit = one.stats[0].back().parameter_bytes() / 4;  // about a block
  for (int r = 0; r < ranks; ++r) {
    const int64_t mine = ModelState(group.peak[r]);
    EXPECT_LE(mine, whole / ranks + 4 * 64) << "rank " << r;
    const int64_t gathered = group.peak[r].at("gathered_parameters");
    if (zero_stage == 3) {
      EXPECT_LE(gathered, 3 * unit) << "rank " << r;
      EXPECT_EQ(group.ledger[r].at("gathered_parameters"), 0) << "freed after the update";
    }
    RecordProperty(absl::StrCat("rank", r, "_state_bytes"),
                   absl::StrCat(mine, " of ", whole, "; gathered at most ", gathered));
  }

  // Resumed on as many ranks, one more step equals the uninterrupted run's
  // bit for bit; resumed on half as many, to float rounding.
  const std::vector<v1::TrainBatch> more = {RandomBatch(7, 50)};
  std::vector<v1::TrainBatch> all = batches;
  all.push_back(more[0]);
  const GroupRun straight = RunGroup(job, ranks, all, dir, "", "_straight");
  const std::string saved = dir + "/ckpt" + std::to_string(ranks);
  const GroupRun resumed = RunGroup(job, ranks, more, dir, saved, "_resumed");
  EXPECT_EQ(resumed.stats[0][0].loss(), straight.stats[0].back().loss());
  EXPECT_EQ(MaxAbsDiff(resumed.weights[0], straight.weights[0]), 0);
  const GroupRun halved = RunGroup(job, ranks / 2, more, dir, saved, "_halved");
  EXPECT_NEAR(halved.stats[0][0].loss(), straight.stats[0].back().loss(),
              1e-5 * std::abs(straight.stats[0].back().loss()));
  EXPECT_LT(MaxAbsDiff(halved.weights[0], straight.weights[0]), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(StagesAndRanks, ShardedLearnerTest,
                         testing::Combine(testing::Values(2, 3), testing::Values(2, 4)),
                         [](const auto& info) {
                           return absl::StrCat("zero", std::get<0>(info.param), "_ranks",
                                               std::get<1>(info.param));
                         });

// Stage 3 composes with the other memory strategies: bf16 compute with
// fp32 masters and activation checkpointing (gradients summed in fp32 over
// the ranks where one learner sums them in bf16 over its micro-batches: a
// looser tolerance), and LoRA (the frozen base sharded, the adapters whole
// on every rank); a LoRA checkpoint restores on the same ranks.
struct Composition {
  const char* name;
  bool bf16_checkpointing;
  int lora_rank;
  double tolerance;
};

class ShardedCompositionTest : public testing::TestWithParam<Composition> {};

TEST_P(ShardedCompositionTest, TwoRanksOfStageThreeMatchOneLearner) {
  const Composition c = GetParam();
  const std::string dir = ::testing::TempDir() + "/sharded_" + c.name;
  std::filesystem::create_directories(dir);
  v1::JobConfig job = SmallJob(2, v1::TOKEN_MEAN);
  job.mutable_model()->set_n_layers(3);
  job.mutable_grpo()->mutable_optimizer()->set_warmup_steps(0);
  job.mutable_deployment()->set_call_timeout_ms(60000);
  if (c.bf16_checkpointing) {
    job.mutable_memory()->set_precision(v1::MemoryConfig::BF16);
    job.mutable_memory()->set_activation_checkpointing(true);
  }
  ASSERT_TRUE(MakeLearner(job)->SaveWeights(dir + "/init.safetensors").ok());
  job.mutable_model()->set_init_checkpoint(dir + "/init.safetensors");
  job.mutable_memory()->mutable_lora()->set_rank(c.lora_rank);
  std::vector<v1::TrainBatch> batches;
  for (int step = 0; step < 3; ++step) batches.push_back(RandomBatch(6, 60 + step));
  const GroupRun one = RunGroup(job, 1, batches, dir);
  job.mutable_memory()->set_zero_stage(3);
  const GroupRun two = RunGroup(job, 2, batches, dir);
  for (size_t step = 0; step < batches.size(); ++step) {
    EXPECT_NEAR(two.stats[0][step].loss(), one.stats[0][step].loss(),
                c.tolerance * std::abs(one.stats[0][step].loss()))
        << "step " << step;
  }
  const double diff = MaxAbsDiff(two.weights[0], one.weights[0]);
  EXPECT_LT(diff, c.tolerance);
  RecordProperty("max_abs_weight_diff", absl::StrCat(diff));
  EXPECT_LT(two.peak[0].at("gathered_parameters"), one.stats[0].back().parameter_bytes());
}

INSTANTIATE_TEST_SUITE_P(Strategies, ShardedCompositionTest,
                         testing::Values(Composition{"bf16_checkpointing", true, 0, 2e-2},
                                         Composition{"lora", false, 4, 1e-5}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace trellis::learner
