#include "weightsync/reshard.h"

#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/tcp_store.h"
#include "env/testing/cpu_contention.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "weightsync/testing/reshard_model.h"

namespace trellis::weightsync {
namespace {

using ::absl::StatusCode;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(60);

// Every element of the model: fp32 bytes of every tensor.
int64_t ModelBytes(const ReshardPlan& plan) {
  int64_t bytes = 0;
  for (const model::FlatUnit& u : plan.units()) bytes += u.numel * 4;
  return bytes;
}

// N senders and K receivers on loopback, the links on fresh ports.
struct Ranks {
  std::shared_ptr<const ReshardPlan> plan;
  std::vector<std::unique_ptr<ReshardSender>> senders;
  std::vector<std::unique_ptr<ReshardReceiver>> receivers;
};

Ranks StartRanks(int n_ranks, int k_ranks, int64_t bucket_bytes, bool start_senders = true,
                 const std::string& transport = "gloo") {
  Ranks r;
  absl::StatusOr<ReshardPlan> plan = ReshardPlan::Make(
      testing::ModelUnits(testing::ModelShape{3, 12, 6, 24, 18}, n_ranks), k_ranks);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return r;
  r.plan = std::make_shared<const ReshardPlan>(*std::move(plan));
  ReshardOptions options;
  options.transport_name = transport;
  options.transport.host = "127.0.0.1";
  options.transport.bucket_bytes = bucket_bytes;
  options.transport.connect_timeout = absl::Seconds(20);
  options.transport.secret = "reshard-test-secret";
  for (int i = 0; i < n_ranks * k_ranks; ++i) {
    absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
    EXPECT_TRUE(port.ok()) << port.status();
    options.ports.push_back(port.value_or(0));
  }
  for (int n = 0; n < n_ranks && start_senders; ++n) {
    auto s = ReshardSender::Start(r.plan, n, options);
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) r.senders.push_back(*std::move(s));
  }
  for (int k = 0; k < k_ranks; ++k) {
    auto recv = ReshardReceiver::Start(r.plan, k, options);
    EXPECT_TRUE(recv.ok()) << recv.status();
    if (recv.ok()) r.receivers.push_back(*std::move(recv));
  }
  return r;
}

// Every actor rank receives `version` on a thread of its own.
std::vector<absl::StatusOr<ReshardReceived>> ReceiveAll(Ranks& r, int64_t version,
                                                        absl::Duration timeout = kTimeout) {
  std::vector<absl::StatusOr<ReshardReceived>> got(r.receivers.size(),
                                                   absl::UnknownError("not run"));
  {
    std::vector<std::jthread> threads;
    for (size_t k = 0; k < r.receivers.size(); ++k) {
      threads.emplace_back([&, k] { got[k] = r.receivers[k]->Receive(version, timeout); });
    }
  }
  return got;
}

// Learner ranks, actor ranks, and the links' transport.
class ReshardSyncTest : public ::testing::TestWithParam<std::tuple<int, int, std::string>> {};

TEST_P(ReshardSyncTest, EveryActorRankGetsExactlyItsSlices) {
  const auto [n_ranks, k_ranks, transport] = GetParam();
  // Small buckets: several per link, and runs split across them.
  Ranks r = StartRanks(n_ranks, k_ranks, /*bucket_bytes=*/1024, /*start_senders=*/true, transport);
  ASSERT_EQ(r.senders.size(), static_cast<size_t>(n_ranks));
  ASSERT_EQ(r.receivers.size(), static_cast<size_t>(k_ranks));
  const ReshardPlan& plan = *r.plan;
  const int64_t model_bytes = ModelBytes(plan);
  // Each actor rank's share, from the shapes: split tensors' bytes / K,
  // whole ones (norms, embedding, head) in full.
  int64_t whole_bytes = 0;
  int64_t split_bytes = 0;
  for (const model::FlatUnit& u : plan.units()) {
    for (const model::FlatEntry& e : u.entries) {
      (model::TensorParallelSlice(e.name, 0, k_ranks).whole() ? whole_bytes : split_bytes) +=
          e.numel() * 4;
    }
  }
  ASSERT_EQ(split_bytes % k_ranks, 0);
  const int64_t share = whole_bytes + split_bytes / k_ranks;

  for (int64_t version : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "version " << version);
    const std::vector<at::Tensor> full = testing::FullUnits(plan, version);
    for (int n = 0; n < n_ranks; ++n) {
      absl::StatusOr<v1::WeightSyncStats> stats =
          r.senders[n]->Publish(version, testing::ShardsOf(full, plan, n));
      ASSERT_TRUE(stats.ok()) << stats.status();
      int64_t pair_bytes = 0;
      for (int k = 0; k < k_ranks; ++k) pair_bytes += plan.PairBytes(n, k);
      EXPECT_EQ(stats->bytes(), pair_bytes);
      // Its staged buckets hold what it sends, and for N > 1 less than the
      // model (64-byte alignment between pieces aside).
      const int64_t staged = r.senders[n]->StagedBytes();
      EXPECT_GE(staged, pair_bytes);
      EXPECT_LE(staged, pair_bytes + 64 * stats->tensors());
      if (n_ranks > 1) EXPECT_LT(staged, model_bytes);
    }
    std::vector<absl::StatusOr<ReshardReceived>> got = ReceiveAll(r, version);
    for (int k = 0; k < k_ranks; ++k) {
      ASSERT_TRUE(got[k].ok()) << got[k].status();
      EXPECT_EQ(got[k]->version, version);
      EXPECT_EQ(got[k]->bytes, share);
      EXPECT_LE(std::abs(static_cast<double>(got[k]->bytes - share)), 0.01 * share);
      EXPECT_EQ(r.receivers[k]->received_bytes(), share * version);
      const std::vector<ReshardPlan::Slice>& slices = plan.Slices(k);
      ASSERT_EQ(got[k]->tensors.size(), slices.size());
      int64_t held = 0;
      for (size_t i = 0; i < slices.size(); ++i) {
        const auto& [name, t] = got[k]->tensors[i];
        const ReshardPlan::Slice& s = slices[i];
        EXPECT_EQ(name, s.name);
        EXPECT_TRUE(at::equal(t, testing::ExpectedSlice(full, plan, s.unit,
                                                        plan.units()[s.unit].entries[s.entry], k)))
            << "actor rank " << k << ": " << name;
        held += t.numel() * t.element_size();
      }
      EXPECT_EQ(held, share);
      if (k_ranks > 1) EXPECT_LT(held, model_bytes);
      // Its links keep the buckets of the last two versions (SparePool),
      // each holding its share and the 64-byte alignment between pieces.
      int64_t moves = 0;
      for (int n = 0; n < n_ranks; ++n) moves += plan.Moves(n, k, 1024).size();
      const int64_t buckets = r.receivers[k]->BucketBytes();
      EXPECT_GE(buckets, share);
      EXPECT_LE(buckets, std::min<int64_t>(version, 2) * (share + 64 * moves));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LearnersByActors, ReshardSyncTest,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Values(1, 2),
                                            ::testing::Values("gloo", "tcp")),
                         [](const auto& info) {
                           return "N" + std::to_string(std::get<0>(info.param)) + "K" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  std::get<2>(info.param);
                         });

TEST(ReshardTest, CorruptedBucketIsDataLossNamingTheLinkAndBucket) {
  Ranks r = StartRanks(2, 2, /*bucket_bytes=*/1024);
  ASSERT_EQ(r.senders.size(), 2u);
  const std::vector<at::Tensor> full = testing::FullUnits(*r.plan, 1);
  for (int n = 0; n < 2; ++n) {
    ASSERT_TRUE(r.senders[n]->Publish(1, testing::ShardsOf(full, *r.plan, n)).ok());
  }
  ASSERT_TRUE(r.senders[1]->CorruptForTesting(/*actor_rank=*/0, /*bucket=*/2).ok());
  std::vector<absl::StatusOr<ReshardReceived>> got = ReceiveAll(r, 1);
  ASSERT_FALSE(got[0].ok());
  EXPECT_EQ(got[0].status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(std::string(got[0].status().message()), HasSubstr("from learner rank 1"));
  EXPECT_THAT(std::string(got[0].status().message()), HasSubstr("bucket 2 of"));
  EXPECT_THAT(std::string(got[0].status().message()), HasSubstr("checksum"));
  // The other actor rank's links are untouched.
  EXPECT_TRUE(got[1].ok()) << got[1].status();
}

TEST(ReshardTest, VersionNeverPublishedIsRefused) {
  Ranks r = StartRanks(2, 1, /*bucket_bytes=*/4096);
  ASSERT_EQ(r.senders.size(), 2u);
  const std::vector<at::Tensor> full = testing::FullUnits(*r.plan, 1);
  for (int n = 0; n < 2; ++n) {
    ASSERT_TRUE(r.senders[n]->Publish(1, testing::ShardsOf(full, *r.plan, n)).ok());
  }
  absl::StatusOr<ReshardReceived> got = r.receivers[0]->Receive(5, kTimeout);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("will never be published"));
  EXPECT_EQ(r.receivers[0]->received_bytes(), 0);
}

// Whether `got` holds exactly actor rank `k`'s slices of `version`.
void ExpectSlicesOf(const ReshardPlan& plan, int k, int64_t version, const ReshardReceived& got) {
  const std::vector<at::Tensor> full = testing::FullUnits(plan, version);
  ASSERT_EQ(got.tensors.size(), plan.Slices(k).size());
  for (size_t i = 0; i < got.tensors.size(); ++i) {
    const ReshardPlan::Slice& s = plan.Slices(k)[i];
    EXPECT_TRUE(at::equal(
        got.tensors[i].second,
        testing::ExpectedSlice(full, plan, s.unit, plan.units()[s.unit].entries[s.entry], k)))
        << "version " << version << ": " << s.name;
  }
}

// An actor rank asking for a version the learner ranks have moved past
// gets the newest one they all serve; a rank ahead of the others makes the
// actor rank wait for the others to publish it too.
TEST(ReshardTest, AnOldVersionGetsTheNewestEveryRankServes) {
  Ranks r = StartRanks(2, 1, /*bucket_bytes=*/4096);
  ASSERT_EQ(r.senders.size(), 2u);
  const auto publish = [&r](int n, int64_t version) {
    return r.senders[n]->Publish(version, testing::ShardsOf(testing::FullUnits(*r.plan, version),
                                                            *r.plan, n));
  };
  for (int64_t version : {1, 2}) {
    for (int n = 0; n < 2; ++n) ASSERT_TRUE(publish(n, version).ok());
  }
  absl::StatusOr<ReshardReceived> got = r.receivers[0]->Receive(1, kTimeout);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version, 2);
  ExpectSlicesOf(*r.plan, 0, 2, *got);

  ASSERT_TRUE(publish(0, 3).ok());
  absl::StatusOr<ReshardReceived> newer = absl::UnknownError("not received");
  {
    std::jthread actor([&] { newer = r.receivers[0]->Receive(2, kTimeout); });
    ASSERT_TRUE(publish(1, 3).ok());
  }
  ASSERT_TRUE(newer.ok()) << newer.status();
  EXPECT_EQ(newer->version, 3);
  ExpectSlicesOf(*r.plan, 0, 3, *newer);
}


// The slices handed back are the caller's while it holds them: later
// versions land elsewhere (the links' buckets, some adopted into the
// slices, are reused only once no slice holds them).
TEST(ReshardTest, SlicesStillHeldAreNeverOverwritten) {
  Ranks r = StartRanks(1, 2, /*bucket_bytes=*/4096);
  ASSERT_EQ(r.senders.size(), 1u);
  std::vector<absl::StatusOr<ReshardReceived>> held;
  for (int64_t version : {1, 2, 3, 4}) {
    ASSERT_TRUE(r.senders[0]->Publish(version, testing::FullUnits(*r.plan, version)).ok());
    held.push_back(r.receivers[1]->Receive(version, kTimeout));
    ASSERT_TRUE(held.back().ok()) << held.back().status();
    // Versions 1 and 3 are kept; 2 is let go once 3 arrived.
    if (version == 3) held[1] = absl::UnknownError("let go");
  }
  ExpectSlicesOf(*r.plan, 1, 1, *held[0]);
  ExpectSlicesOf(*r.plan, 1, 3, *held[2]);
  ExpectSlicesOf(*r.plan, 1, 4, *held[3]);
  for (size_t i = 0; i < held[0]->tensors.size(); ++i) {
    EXPECT_NE(held[0]->tensors[i].second.data_ptr(), held[3]->tensors[i].second.data_ptr());
  }
}

// On a machine with more runnable threads than cores, every actor rank
// receives every version whole, whatever the interleaving: the learner
// ranks publish while the actor ranks already wait.
TEST(ReshardTest, EveryVersionArrivesWholeUnderCpuContention) {
  Ranks r = StartRanks(2, 2, /*bucket_bytes=*/2048);
  ASSERT_EQ(r.senders.size(), 2u);
  env::testing::CpuContention contention;
  for (int64_t version = 1; version <= 4; ++version) {
    std::vector<absl::StatusOr<ReshardReceived>> got(2, absl::UnknownError("not run"));
    std::vector<absl::Status> published(2);
    const std::vector<at::Tensor> full = testing::FullUnits(*r.plan, version);
    {
      std::vector<std::jthread> ranks;
      for (int k = 0; k < 2; ++k) {
        ranks.emplace_back([&, k] { got[k] = r.receivers[k]->Receive(version, kTimeout); });
      }
      for (int n = 0; n < 2; ++n) {
        ranks.emplace_back([&, n] {
          published[n] =
              r.senders[n]->Publish(version, testing::ShardsOf(full, *r.plan, n)).status();
        });
      }
    }
    for (int n = 0; n < 2; ++n) ASSERT_TRUE(published[n].ok()) << published[n];
    for (int k = 0; k < 2; ++k) {
      ASSERT_TRUE(got[k].ok()) << "version " << version << ": " << got[k].status();
      ExpectSlicesOf(*r.plan, k, version, *got[k]);
    }
  }
}

// A version the actor ranks wait for goes out from the shards in place;
// Publish returns only once nothing reads them: the learner's next step,
// in place, never reaches what the actor ranks receive.
TEST(ReshardTest, ShardsChangedOnceEveryPublishReturnedNeverReachTheActors) {
  Ranks r = StartRanks(2, 2, /*bucket_bytes=*/2048);
  ASSERT_EQ(r.senders.size(), 2u);
  for (int64_t version = 1; version <= 3; ++version) {
    std::vector<absl::StatusOr<ReshardReceived>> got(2, absl::UnknownError("not run"));
    const std::vector<at::Tensor> full = testing::FullUnits(*r.plan, version);
    std::vector<std::vector<at::Tensor>> shards;
    for (int n = 0; n < 2; ++n) shards.push_back(testing::ShardsOf(full, *r.plan, n));
    {
      std::vector<std::jthread> ranks;
      for (int k = 0; k < 2; ++k) {
        ranks.emplace_back([&, k] { got[k] = r.receivers[k]->Receive(version, kTimeout); });
      }
      for (int n = 0; n < 2; ++n) {
        ranks.emplace_back([&, n] {
          EXPECT_TRUE(r.senders[n]->Publish(version, shards[n]).ok());
          for (at::Tensor& shard : shards[n]) shard.fill_(-1);
        });
      }
    }
    for (int k = 0; k < 2; ++k) {
      ASSERT_TRUE(got[k].ok()) << "version " << version << ": " << got[k].status();
      ExpectSlicesOf(*r.plan, k, version, *got[k]);
    }
  }
}

TEST(ReshardTest, LearnerRankGoneIsAnErrorNamingIt) {
  Ranks r = StartRanks(2, 1, /*bucket_bytes=*/4096);
  ASSERT_EQ(r.senders.size(), 2u);
  const std::vector<at::Tensor> full = testing::FullUnits(*r.plan, 1);
  ASSERT_TRUE(r.senders[0]->Publish(1, testing::ShardsOf(full, *r.plan, 0)).ok());
  r.senders[1].reset();  // Learner rank 1 is gone before it published.
  absl::StatusOr<ReshardReceived> got = r.receivers[0]->Receive(1, absl::Seconds(2));
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().code() == StatusCode::kDeadlineExceeded ||
              got.status().code() == StatusCode::kUnavailable)
      << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("from learner rank 1"));
}

TEST(ReshardTest, BadShardsAndRanksAreInvalidArgument) {
  Ranks r = StartRanks(2, 1, /*bucket_bytes=*/4096);
  ASSERT_EQ(r.senders.size(), 2u);
  std::vector<at::Tensor> shards = testing::ShardsOf(testing::FullUnits(*r.plan, 1), *r.plan, 0);
  shards[1] = shards[1].narrow(0, 0, 3);
  absl::StatusOr<v1::WeightSyncStats> bad = r.senders[0]->Publish(1, shards);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("model.layers.1"));
  EXPECT_EQ(r.senders[0]->Publish(1, {}).status().code(), StatusCode::kInvalidArgument);
  ReshardOptions options;
  options.ports = {1, 2};
  EXPECT_EQ(ReshardSender::Start(r.plan, 2, options).status().code(), StatusCode::kInvalidArgument);
  options.ports = {1};
  EXPECT_EQ(ReshardReceiver::Start(r.plan, 0, options).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trellis::weightsync
