#include "weightsync/internal/staging.h"

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "env/testing/cpu_contention.h"
#include "gtest/gtest.h"

namespace trellis::weightsync::internal {
namespace {

NamedTensors Weights(float value) {
  return {{"a", torch::full({1000}, value)}, {"b", torch::full({3, 7}, value)}};
}

std::shared_ptr<const BucketSet> Staged(VersionStage& stage, int64_t version) {
  absl::StatusOr<std::shared_ptr<const BucketSet>> set =
      stage.WaitFor(version, absl::Now() + absl::Seconds(5));
  EXPECT_TRUE(set.ok()) << set.status();
  return set.ok() ? *set : nullptr;
}

float FirstFloat(const BucketSet& set) {
  return *reinterpret_cast<const float*>(set.buckets[0].data_ptr<uint8_t>());
}

TEST(VersionStageTest, StagesASnapshotOfTheTensors) {
  VersionStage stage("test", 1 << 20);
  NamedTensors w = Weights(1);
  ASSERT_TRUE(stage.Stage(1, w).ok());
  for (auto& [name, t] : w) t.fill_(9);  // The learner's next step, in place.
  std::shared_ptr<const BucketSet> set = Staged(stage, 1);
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(FirstFloat(*set), 1.0f);
  EXPECT_TRUE(VerifyChecksums(*set).ok());
}

TEST(VersionStageTest, ReusesTheStagedBucketsUnlessASenderHoldsThem) {
  VersionStage stage("test", 1 << 20);
  ASSERT_TRUE(stage.Stage(1, Weights(1)).ok());
  const void* first = Staged(stage, 1)->buckets[0].data_ptr();
  ASSERT_TRUE(stage.Stage(2, Weights(2)).ok());
  // A sender still sending version 2 holds it.
  std::shared_ptr<const BucketSet> held = Staged(stage, 2);
  EXPECT_EQ(held->buckets[0].data_ptr(), first);
  ASSERT_TRUE(stage.Stage(3, Weights(3)).ok());
  std::shared_ptr<const BucketSet> third = Staged(stage, 3);
  EXPECT_NE(third->buckets[0].data_ptr(), held->buckets[0].data_ptr());
  EXPECT_EQ(FirstFloat(*held), 2.0f);
  EXPECT_TRUE(VerifyChecksums(*held).ok());
  EXPECT_EQ(FirstFloat(*third), 3.0f);
  EXPECT_TRUE(VerifyChecksums(*third).ok());
  const void* third_memory = third->buckets[0].data_ptr();
  third.reset();
  ASSERT_TRUE(stage.Stage(4, Weights(4)).ok());
  EXPECT_EQ(Staged(stage, 4)->buckets[0].data_ptr(), third_memory);
  EXPECT_EQ(stage.newest_version(), 4);
}

TEST(VersionStageTest, ReusedBucketsHaveZeroPadding) {
  VersionStage stage("test", 1 << 20);
  // 67 bytes, all 0xFF; then 3 bytes at 0 and 3 at kAlignment: 67 again.
  ASSERT_TRUE(stage.Stage(1, {{"x", torch::full({67}, 255, torch::kUInt8)}}).ok());
  const NamedTensors two = {{"a", torch::full({3}, 1, torch::kUInt8)},
                            {"b", torch::full({3}, 2, torch::kUInt8)}};
  ASSERT_TRUE(stage.Stage(2, two).ok());
  std::shared_ptr<const BucketSet> set = Staged(stage, 2);
  ASSERT_EQ(set->buckets.size(), 1u);
  ASSERT_EQ(set->buckets[0].numel(), kAlignment + 3);
  const uint8_t* bytes = set->buckets[0].data_ptr<uint8_t>();
  for (int64_t i = 3; i < kAlignment; ++i) EXPECT_EQ(bytes[i], 0) << "byte " << i;
  EXPECT_EQ(bytes[kAlignment], 2);
  EXPECT_TRUE(VerifyChecksums(*set).ok());
}

TEST(VersionStageTest, StreamingWaiterGetsEveryBucketOfTheVersion) {
  VersionStage stage("test", 1024);  // "a" alone, then "b": two buckets.
  absl::StatusOr<StreamedVersion> got;
  std::jthread waiter([&] { got = stage.WaitForStream(1, absl::Now() + absl::Seconds(10)); });
  ASSERT_TRUE(stage.Stage(1, Weights(5)).ok());
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->set->buckets.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(got->progress->WaitPacked(i, absl::Now() + absl::Seconds(5)).ok());
    EXPECT_TRUE(VerifyBucket(*got->set, i).ok());
  }
  EXPECT_EQ(FirstFloat(*got->set), 5.0f);
}

// A receiver that a streaming sender served, holding every bucket of
// version v (the last one's checksum too), asks for v + 1.
struct StreamFollower {
  absl::Mutex mu;
  int64_t held ABSL_GUARDED_BY(mu) = 0;
  bool done ABSL_GUARDED_BY(mu) = false;

  void Follow(VersionStage& stage, int64_t last) {
    for (int64_t next = 1; next <= last;) {
      absl::StatusOr<StreamedVersion> got =
          stage.WaitForStream(next, absl::Now() + absl::Seconds(60));
      ASSERT_TRUE(got.ok()) << got.status();
      const size_t buckets = got->set->buckets.size();
      ASSERT_TRUE(got->progress->WaitPacked(buckets - 1, absl::Now() + absl::Seconds(60)).ok());
      next = got->set->version + 1;
      absl::MutexLock lock(&mu);
      held = got->set->version;
    }
  }

  // Waits until the receiver holds `version` or has stopped; true if it holds it.
  bool AwaitHeld(int64_t version) {
    absl::MutexLock lock(&mu);
    auto reached = [this, version]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return held >= version || done;
    };
    mu.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(60));
    return held >= version;
  }
};

// A streaming sender hands out a version while it is packed, so its
// receiver can hold all of it before Stage has recorded it as staged. The
// version after is never refused, whatever the interleaving: in lockstep
// (each version staged while the receiver waits for it, its next request
// racing the end of Stage) under CPU contention, for many versions.
TEST(VersionStageTest, TheVersionAfterAStreamedOneIsNeverRefusedUnderLoad) {
  env::testing::CpuContention load;
  VersionStage stage("test", 1024);  // Two buckets.
  constexpr int64_t kVersions = 10000;
  StreamFollower follower;
  std::jthread receiver([&] {
    follower.Follow(stage, kVersions);
    absl::MutexLock lock(&follower.mu);
    follower.done = true;
  });
  for (int64_t v = 1; v <= kVersions; ++v) {
    ASSERT_TRUE(stage.Stage(v, Weights(static_cast<float>(v))).ok()) << v;
    ASSERT_TRUE(follower.AwaitHeld(v)) << "the receiver stopped before version " << v;
  }
}

// With every slot streaming it, a version is sent from the tensors in
// place: Stage packs nothing more and returns only once the sender let go;
// such a version is not staged for later receivers. (The waiter must wait
// before packing ends; each try gives it 5 ms to get there.)
TEST(VersionStageTest, VersionEverySlotStreamsIsReadInPlaceUntilTheSenderLetsGo) {
  VersionStage stage("test", 1024, /*slots=*/1);  // "a" alone, then "b".
  int64_t version = 0;
  absl::StatusOr<StreamedVersion> got;
  std::jthread publisher;
  auto staged = std::make_unique<absl::Notification>();
  while (!got.ok() || !got->progress->in_place()) {
    ASSERT_LT(version, 20) << "the waiter never streamed a version while it was packed";
    got = absl::UnknownError("let go");
    if (publisher.joinable()) publisher.join();
    ++version;
    std::jthread waiter(
        [&] { got = stage.WaitForStream(version, absl::Now() + absl::Seconds(10)); });
    absl::SleepFor(absl::Milliseconds(5));
    staged = std::make_unique<absl::Notification>();
    publisher = std::jthread([&stage, done = staged.get(), version] {
      EXPECT_TRUE(stage.Stage(version, Weights(5)).ok());
      done->Notify();
    });
    waiter.join();
    ASSERT_TRUE(got.ok()) << got.status();
  }
  absl::StatusOr<PackProgress::From> from =
      got->progress->WaitReadable(1, absl::Now() + absl::Seconds(10), 84);
  ASSERT_TRUE(from.ok()) << from.status();
  EXPECT_EQ(*from, PackProgress::From::kTensors);
  EXPECT_FALSE(got->progress->Whole(1));
  EXPECT_EQ(got->tensors->at(1).first, "b");
  EXPECT_FALSE(staged->WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  got = absl::UnknownError("let go");
  staged->WaitForNotification();
  publisher.join();
  EXPECT_EQ(stage.newest_version(), version);
  absl::StatusOr<std::shared_ptr<const BucketSet>> later =
      stage.WaitFor(version, absl::Now() + absl::Milliseconds(10));
  EXPECT_EQ(later.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(later.status().message().find("sent in place"), std::string::npos) << later.status();
  // The next version, nobody streaming it, is staged whole.
  ASSERT_TRUE(stage.Stage(version + 1, Weights(6)).ok());
  EXPECT_EQ(FirstFloat(*Staged(stage, version + 1)), 6.0f);
}

TEST(PackProgressTest, PackingStopsForSendingInPlaceOnceEverySlotStreams) {
  PackProgress progress(2, /*slots=*/2);
  EXPECT_TRUE(progress.Packing(0, 4096));
  progress.Attach();
  progress.Packed(1);
  progress.Attach();
  EXPECT_FALSE(progress.Packing(1, 64));
  EXPECT_FALSE(progress.Packing(1, 128));  // Stopped for good.
  EXPECT_TRUE(progress.in_place());
  EXPECT_TRUE(progress.Whole(0));
  EXPECT_FALSE(progress.Whole(1));
  const absl::Time now = absl::Now();
  EXPECT_EQ(*progress.WaitReadable(0, now, 4096), PackProgress::From::kBucket);
  EXPECT_EQ(*progress.WaitReadable(1, now, 64), PackProgress::From::kBucket);
  EXPECT_EQ(*progress.WaitReadable(1, now, 65), PackProgress::From::kTensors);
  progress.Detach();
  progress.Detach();
  progress.AwaitDetached();
}

TEST(PackProgressTest, WaitGetsThePackedBytesThePackingErrorOrTimesOut) {
  PackProgress progress(2);
  progress.Packing(0, 4096);
  progress.Packed(1);
  progress.Packing(1, 100);
  EXPECT_TRUE(progress.WaitPacked(0, absl::Now()).ok());
  EXPECT_TRUE(progress.WaitPacked(1, absl::Now(), 100).ok());
  const absl::Time soon = absl::Now() + absl::Milliseconds(1);
  EXPECT_EQ(progress.WaitPacked(1, soon, 101).code(), absl::StatusCode::kDeadlineExceeded);
  // The whole bucket, with its checksum, is not packed yet.
  EXPECT_EQ(progress.WaitPacked(1, soon).code(), absl::StatusCode::kDeadlineExceeded);
  progress.Fail(absl::InternalError("device copy failed"));
  EXPECT_EQ(progress.WaitPacked(1, absl::InfiniteFuture()).code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace trellis::weightsync::internal
