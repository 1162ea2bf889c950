// A launched job's resharding ends (reshard_ends.h) as threads of one
// process: two learner ranks' ShardPublishers listing their links in their
// directories, two actors (replicas) of two tensor-parallel ranks each
// reading the directories and receiving every rank's slices by name.

#include "weightsync/reshard_ends.h"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "weightsync/testing/reshard_model.h"

namespace trellis::weightsync {
namespace {

using ::testing::HasSubstr;

constexpr int kLearners = 2;
constexpr int kRanks = 2;
constexpr int kActors = 2;
const testing::ModelShape kShape{2, 12, 6, 24, 18};

ReshardEndOptions EndOptions() {
  ReshardEndOptions o;
  o.transport.host = "127.0.0.1";
  o.transport.bucket_bytes = 512;
  o.transport.connect_timeout = absl::Seconds(20);
  o.transport.secret = "reshard-ends-secret";
  o.transport.num_receivers = kActors;
  o.learner_ranks = kLearners;
  o.actor_ranks = kRanks;
  return o;
}

TEST(ReshardEndsTest, EveryActorRankReceivesItsSlicesByName) {
  const std::vector<model::FlatUnit> units = testing::ModelUnits(kShape, kLearners);
  absl::StatusOr<ReshardPlan> plan = ReshardPlan::Make(units, kRanks);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::pair<std::string, int>> directories;
  std::vector<std::unique_ptr<ShardPublisher>> learners;
  for (int n = 0; n < kLearners; ++n) {
    ReshardEndOptions o = EndOptions();
    o.transport.port = comm::PickFreeTcpPort("127.0.0.1").value();
    directories.emplace_back("127.0.0.1", o.transport.port);
    learners.push_back(std::make_unique<ShardPublisher>(o, n));
    ASSERT_TRUE(learners.back()->Bind(units).ok());
  }
  const std::vector<at::Tensor> full = testing::FullUnits(*plan, 3);
  for (int n = 0; n < kLearners; ++n) {
    absl::StatusOr<v1::WeightSyncStats> sent =
        learners[n]->PublishShards(3, testing::ShardsOf(full, *plan, n));
    ASSERT_TRUE(sent.ok()) << sent.status();
    EXPECT_GT(learners[n]->StagedBytes(), 0);
  }
  EXPECT_EQ(learners[0]->Publish(4, {}).status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<absl::Status> got(kActors);
  std::vector<NamedTensors> dst(kActors);
  for (int a = 0; a < kActors; ++a) {
    for (int k = 0; k < kRanks; ++k) {
      for (const ReshardPlan::Slice& s : plan->Slices(k)) {
        dst[a].emplace_back(RankTensorName(k, s.name), torch::zeros(s.shape));
      }
    }
  }
  {
    std::vector<std::jthread> actors;
    for (int a = 0; a < kActors; ++a) {
      actors.emplace_back([&, a] {
        ReshardEndOptions o = EndOptions();
        o.transport.receiver_index = a;
        SliceReceiver receiver(o, directories);
        got[a] = receiver.Bind(units);
        if (got[a].ok()) got[a] = receiver.Receive(3, dst[a], absl::Seconds(60)).status();
      });
    }
  }
  for (int a = 0; a < kActors; ++a) {
    ASSERT_TRUE(got[a].ok()) << "actor " << a << ": " << got[a];
    size_t i = 0;
    for (int k = 0; k < kRanks; ++k) {
      for (const ReshardPlan::Slice& s : plan->Slices(k)) {
        const model::FlatEntry& e = plan->units()[s.unit].entries[s.entry];
        EXPECT_TRUE(torch::equal(dst[a][i++].second,
                                 testing::ExpectedSlice(full, *plan, s.unit, e, k)))
            << "actor " << a << " " << RankTensorName(k, s.name);
      }
    }
  }
}

TEST(ReshardEndsTest, ATensorTheSyncLacksChangesNothing) {
  const std::vector<model::FlatUnit> units = testing::ModelUnits(kShape, 1);
  ReshardEndOptions o = EndOptions();
  o.learner_ranks = 1;
  o.transport.num_receivers = 1;
  o.transport.port = comm::PickFreeTcpPort("127.0.0.1").value();
  ShardPublisher learner(o, 0);
  ASSERT_TRUE(learner.Bind(units).ok());
  absl::StatusOr<ReshardPlan> plan = ReshardPlan::Make(units, kRanks);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(learner.PublishShards(1, testing::ShardsOf(testing::FullUnits(*plan, 1), *plan, 0))
                  .ok());
  SliceReceiver receiver(o, {{"127.0.0.1", o.transport.port}});
  ASSERT_TRUE(receiver.Bind(units).ok());
  NamedTensors dst;
  for (int k = 0; k < kRanks; ++k) {
    for (const ReshardPlan::Slice& s : plan->Slices(k)) {
      dst.emplace_back(RankTensorName(k, s.name), torch::zeros(s.shape));
    }
  }
  dst.emplace_back(RankTensorName(1, "no.such.weight"), torch::zeros({3}));
  const absl::StatusOr<v1::WeightSyncStats> got = receiver.Receive(1, dst, absl::Seconds(60));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got.status().message(), HasSubstr("carries no tensor tp1/no.such.weight"));
  for (const auto& [name, t] : dst) EXPECT_EQ(t.abs().sum().item<float>(), 0) << name;
  dst.pop_back();
  EXPECT_TRUE(receiver.Receive(1, dst, absl::Seconds(60)).ok());
  EXPECT_GT(dst.front().second.abs().sum().item<float>(), 0);
}

TEST(ReshardEndsTest, LayoutsOverAnotherRankCountAreRefused) {
  ShardPublisher learner(EndOptions(), 0);
  const absl::Status s = learner.Bind(testing::ModelUnits(kShape, 3));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("over 3 learner ranks, the job has 2"));
}

}  // namespace
}  // namespace trellis::weightsync
