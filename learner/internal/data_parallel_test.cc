#include "learner/internal/data_parallel.h"

#include <functional>
#include <thread>

#include "comm/tcp_store.h"
#include "gtest/gtest.h"

namespace trellis::learner::internal {
namespace {

// Runs body(group) on `size` ranks, each a thread joined to one Gloo group
// on a free loopback port.
void OnRanks(int size, int64_t bucket_bytes, const std::function<void(DataParallelGroup&)>& body) {
  absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      GroupOptions o;
      o.member = {r, size, "127.0.0.1", *port, ""};
      o.timeout = absl::Seconds(30);
      o.bucket_bytes = bucket_bytes;
      o.worker_id = "learner-" + std::to_string(r);
      absl::StatusOr<std::unique_ptr<DataParallelGroup>> group = DataParallelGroup::Join(o);
      ASSERT_TRUE(group.ok()) << group.status();
      EXPECT_EQ((*group)->rank(), r);
      EXPECT_EQ((*group)->size(), size);
      body(**group);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(DataParallelGroupTest, AllReduceSumsTensorsOfEveryDtypeInBuckets) {
  // 64-byte buckets: the 40-float tensor gets one of its own, the others
  // share; the int64 tensor cannot share with floats.
  OnRanks(2, 64, [](DataParallelGroup& g) {
    const float r = static_cast<float>(g.rank());
    std::vector<torch::Tensor> ts = {torch::full({2, 3}, r + 1), torch::full({40}, 10 * (r + 1)),
                                     torch::full({4}, int64_t{3} + g.rank(), torch::kInt64),
                                     torch::arange(5, torch::kFloat32) * (r + 1)};
    ASSERT_TRUE(g.AllReduceSum(ts).ok());
    EXPECT_TRUE(ts[0].equal(torch::full({2, 3}, 3.0f)));
    EXPECT_TRUE(ts[1].equal(torch::full({40}, 30.0f)));
    EXPECT_TRUE(ts[2].equal(torch::full({4}, int64_t{7}, torch::kInt64)));
    EXPECT_TRUE(ts[3].equal(torch::arange(5, torch::kFloat32) * 3));
    const Traffic traffic = g.TakeTraffic();
    EXPECT_EQ(traffic.bytes, (6 + 40 + 5) * 4 + 4 * 8);
    EXPECT_GT(traffic.seconds, 0);
    EXPECT_EQ(g.TakeTraffic().bytes, 0);
    EXPECT_EQ(g.buffer_bytes(), 160);  // The 40-float tensor's own bucket.
  });
}

TEST(DataParallelGroupTest, BroadcastTakesEachTensorFromItsOwner) {
  OnRanks(3, 1 << 20, [](DataParallelGroup& g) {
    const float r = static_cast<float>(g.rank());
    std::vector<torch::Tensor> ts = {torch::full({3}, r), torch::full({2, 2}, 10 + r),
                                     torch::full({5}, 20 + r), torch::full({1}, 30 + r)};
    const std::vector<int> owners = {2, 0, 0, 1};
    ASSERT_TRUE(g.Broadcast(ts, owners).ok());
    EXPECT_TRUE(ts[0].equal(torch::full({3}, 2.0f)));
    EXPECT_TRUE(ts[1].equal(torch::full({2, 2}, 10.0f)));
    EXPECT_TRUE(ts[2].equal(torch::full({5}, 20.0f)));
    EXPECT_TRUE(ts[3].equal(torch::full({1}, 31.0f)));
    EXPECT_EQ(g.TakeTraffic().bytes, (3 + 4 + 5 + 1) * 4);
    // Owners [0, 0] of rank 0 share a bucket: 9 floats.
    EXPECT_EQ(g.buffer_bytes(), 9 * 4);
  });
}

TEST(DataParallelGroupTest, BroadcastRefusesOwnersThatDoNotMatchTheTensors) {
  OnRanks(2, 1 << 20, [](DataParallelGroup& g) {
    absl::Status s = g.Broadcast({torch::zeros({2})}, {0, 1});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  });
}

TEST(DataParallelGroupTest, AllReduceSumsScalars) {
  OnRanks(2, 1 << 20, [](DataParallelGroup& g) {
    std::vector<double> v = {1.5 + g.rank(), 1e-12, -2.0 * g.rank()};
    ASSERT_TRUE(g.AllReduceSum(v).ok());
    EXPECT_DOUBLE_EQ(v[0], 4.0);
    EXPECT_DOUBLE_EQ(v[1], 2e-12);
    EXPECT_DOUBLE_EQ(v[2], -2.0);
  });
}

TEST(DataParallelGroupTest, GroupOfOneMovesNothing) {
  absl::StatusOr<std::unique_ptr<DataParallelGroup>> g = DataParallelGroup::Join(GroupOptions{});
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<torch::Tensor> ts = {torch::ones({4})};
  ASSERT_TRUE((*g)->AllReduceSum(ts).ok());
  ASSERT_TRUE((*g)->Broadcast(ts, {0}).ok());
  EXPECT_TRUE(ts[0].equal(torch::ones({4})));
  EXPECT_EQ((*g)->TakeTraffic().bytes, 0);
  EXPECT_EQ((*g)->buffer_bytes(), 0);
}

TEST(DataParallelGroupTest, JoinRefusesBadOptionsNamingThem) {
  GroupOptions o;
  o.member.rank = 2;
  o.member.size = 2;
  absl::StatusOr<std::unique_ptr<DataParallelGroup>> g = DataParallelGroup::Join(o);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("rank 2 is not in a group of size 2"), std::string::npos)
      << g.status();
  o.member.rank = 1;
  g = DataParallelGroup::Join(o);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("store address"), std::string::npos) << g.status();
}

TEST(DataParallelGroupTest, JoinGivesUpWhenRankZeroNeverComes) {
  absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  GroupOptions o;
  o.member = {1, 2, "127.0.0.1", *port, ""};
  o.timeout = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<DataParallelGroup>> g = DataParallelGroup::Join(o);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kDeadlineExceeded) << g.status();
}

TEST(DataParallelGroupTest, CudaGroupThisMachineCannotServeFailsBeforeTheRendezvous) {
  // No machine has device 99: a build with NCCL says so, one without says
  // NCCL is missing; neither reaches for the store, which nothing hosts.
  GroupOptions o;
  o.member = {1, 2, "127.0.0.1", 1, ""};
  o.device = torch::Device(torch::kCUDA, 99);
  o.worker_id = "learner-1";
  absl::StatusOr<std::unique_ptr<DataParallelGroup>> g = DataParallelGroup::Join(o);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition) << g.status();
  EXPECT_NE(g.status().message().find("learner-1: learner group on cuda:99: "), std::string::npos)
      << g.status();
}

TEST(DataParallelGroupTest, GroupOfOneOnCudaNeedsNeitherNcclNorADevice) {
  GroupOptions o;
  o.device = torch::Device(torch::kCUDA, 0);
  absl::StatusOr<std::unique_ptr<DataParallelGroup>> g = DataParallelGroup::Join(o);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->size(), 1);
}

TEST(RankRowsTest, SplitsRowsEvenlyAndContiguously) {
  using Rows = std::pair<int64_t, int64_t>;
  EXPECT_EQ(RankRows(10, 0, 1), Rows(0, 10));
  EXPECT_EQ(RankRows(7, 0, 2), Rows(0, 4));
  EXPECT_EQ(RankRows(7, 1, 2), Rows(4, 7));
  EXPECT_EQ(RankRows(2, 2, 3), Rows(2, 2));  // No rows left.
}

TEST(ShardByBytesTest, BalancesWholeTensorsLargestFirst) {
  EXPECT_EQ(ShardByBytes({100, 10, 60, 50, 10}, 2), (std::vector<int>{0, 0, 1, 1, 0}));
  EXPECT_EQ(ShardByBytes({4, 4, 4}, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(ShardByBytes({8}, 3), (std::vector<int>{0}));
}

}  // namespace
}  // namespace trellis::learner::internal
