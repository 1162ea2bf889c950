#include "weightsync/testing/transport_conformance.h"

#include <torch/torch.h>

#include <chrono>
#include <future>
#include <stop_token>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "weightsync/internal/inprocess_testing.h"

namespace trellis::weightsync::conformance {
namespace {

using ::absl::StatusCode;

// Small buckets so that every test crosses several of them.
constexpr int64_t kBucketBytes = 4096;

// Mixed dtypes and sizes; every value depends on `v`, so a receiver can
// tell which version it holds. "layer1.weight" (8000 bytes) outgrows a
// bucket; "transposed" is not contiguous; "empty" has no elements.
NamedTensors MakeWeights(int64_t v) {
  const double d = static_cast<double>(v);
  NamedTensors w;
  w.emplace_back("embed.weight",
                 torch::arange(15, torch::kFloat).reshape({3, 5}) + d);
  w.emplace_back("layer0.bias", torch::full({100}, d, torch::kDouble));
  w.emplace_back("layer1.weight", torch::arange(1000, torch::kLong) + v);
  w.emplace_back("mask", torch::full({7}, v % 256, torch::kByte));
  w.emplace_back("bf16", torch::full({33, 2}, d, torch::kBFloat16));
  w.emplace_back("empty", torch::zeros({0, 4}, torch::kInt));
  w.emplace_back("flags", torch::full({10}, v % 2 == 1, torch::kBool));
  w.emplace_back("transposed",
                 (torch::arange(600, torch::kFloat).reshape({20, 30}) + d).t());
  return w;
}

// Receiver tensors shaped like `src`, filled with a sentinel; "transposed"
// is a strided view, as a receiver's live weights may be.
NamedTensors MakeReceiver(const NamedTensors& src) {
  NamedTensors dst;
  for (const auto& [name, t] : src) {
    if (name == "transposed") {
      dst.emplace_back(name, torch::full({20, 30}, -1.0f).t());
    } else {
      dst.emplace_back(name, torch::full(t.sizes(), 7, t.options()));
    }
  }
  return dst;
}

NamedTensors Clone(const NamedTensors& src) {
  NamedTensors out;
  for (const auto& [name, t] : src) out.emplace_back(name, t.clone());
  return out;
}

::testing::AssertionResult SameValues(const NamedTensors& a,
                                      const NamedTensors& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << a.size() << " vs " << b.size();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || !torch::equal(a[i].second, b[i].second)) {
      return ::testing::AssertionFailure() << "tensor '" << a[i].first
                                           << "' differs";
    }
  }
  return ::testing::AssertionSuccess();
}

int64_t PayloadBytes(const NamedTensors& t) {
  int64_t sum = 0;
  for (const auto& [name, x] : t) sum += x.numel() * x.element_size();
  return sum;
}

// Publishes on another thread, for transports whose Publish waits for a
// receiver.
std::future<absl::StatusOr<v1::WeightSyncStats>> PublishAsync(
    Publisher& publisher, int64_t version, NamedTensors tensors) {
  return std::async(std::launch::async, [&publisher, version, tensors] {
    return publisher.Publish(version, tensors);
  });
}

}  // namespace

absl::StatusOr<TransportEnds> MakeByName(const TransportRegistry& registry,
                                         absl::string_view name, const TransportOptions& options) {
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = registry.NewPublisher(name, options);
  if (!publisher.ok()) return publisher.status();
  absl::StatusOr<std::unique_ptr<Receiver>> receiver = registry.NewReceiver(name, options);
  if (!receiver.ok()) return receiver.status();
  return TransportEnds{*std::move(publisher), *std::move(receiver)};
}

absl::Status CorruptStaged(TransportEnds& ends, int bucket) {
  return internal::CorruptBucketForTesting(*ends.publisher, bucket, 17);
}

std::string TransportFactoryName(
    const ::testing::TestParamInfo<TransportFactory>& info) {
  return info.param.name;
}

void TransportConformanceTest::SetUp() {
  if (GetParam().unavailable) {
    const std::string reason = GetParam().unavailable();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
}

TransportEnds TransportConformanceTest::Make(int64_t bucket_bytes) {
  TransportOptions options;
  options.bucket_bytes = bucket_bytes;
  absl::StatusOr<TransportEnds> ends = GetParam().make(options);
  EXPECT_TRUE(ends.ok()) << ends.status();
  return ends.ok() ? *std::move(ends) : TransportEnds{};
}

TEST_P(TransportConformanceTest, RoundTripsMixedDtypesAcrossBuckets) {
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  const NamedTensors src = MakeWeights(1);
  auto published = PublishAsync(*t.publisher, 1, src);
  NamedTensors dst = MakeReceiver(src);
  absl::StatusOr<v1::WeightSyncStats> got =
      t.receiver->Receive(1, dst, absl::Seconds(30));
  ASSERT_TRUE(got.ok()) << got.status();
  absl::StatusOr<v1::WeightSyncStats> sent = published.get();
  ASSERT_TRUE(sent.ok()) << sent.status();

  EXPECT_TRUE(SameValues(dst, src));
  EXPECT_EQ(sent->version(), 1);
  EXPECT_EQ(sent->tensors(), static_cast<int>(src.size()));
  EXPECT_EQ(sent->bytes(), PayloadBytes(src));
  EXPECT_GE(sent->buckets(), 3);  // 11.4 KB in 4 KiB buckets.
  EXPECT_GE(sent->gather_seconds(), 0.0);
  EXPECT_GE(sent->transfer_seconds(), 0.0);
  EXPECT_EQ(got->version(), 1);
  EXPECT_EQ(got->tensors(), sent->tensors());
  EXPECT_EQ(got->bytes(), sent->bytes());
  EXPECT_EQ(got->buckets(), sent->buckets());
  EXPECT_GE(got->load_seconds(), 0.0);
}

TEST_P(TransportConformanceTest, VersionsMustIncrease) {
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  auto first = PublishAsync(*t.publisher, 2, MakeWeights(2));
  NamedTensors dst = MakeReceiver(MakeWeights(2));
  ASSERT_TRUE(t.receiver->Receive(2, dst, absl::Seconds(30)).ok());
  ASSERT_TRUE(first.get().ok());
  EXPECT_EQ(t.publisher->Publish(2, MakeWeights(2)).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.publisher->Publish(1, MakeWeights(1)).status().code(),
            StatusCode::kFailedPrecondition);
  auto third = PublishAsync(*t.publisher, 3, MakeWeights(3));
  absl::StatusOr<v1::WeightSyncStats> got =
      t.receiver->Receive(3, dst, absl::Seconds(30));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version(), 3);
  EXPECT_TRUE(third.get().ok());
}

TEST_P(TransportConformanceTest, BadPublishInputIsInvalidArgument) {
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  NamedTensors twice = MakeWeights(1);
  twice.push_back(twice.front());
  EXPECT_EQ(t.publisher->Publish(1, twice).status().code(),
            StatusCode::kInvalidArgument);
  NamedTensors undefined = MakeWeights(1);
  undefined.emplace_back("ghost", at::Tensor());
  EXPECT_EQ(t.publisher->Publish(1, undefined).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_P(TransportConformanceTest, ReceiveTimesOutNamingTheVersion) {
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  NamedTensors dst = MakeReceiver(MakeWeights(1));
  const NamedTensors before = Clone(dst);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::WeightSyncStats> got =
      t.receiver->Receive(1, dst, absl::Milliseconds(200));
  const double waited = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count();
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find(">= 1"), std::string::npos)
      << got.status();
  EXPECT_GE(waited, 0.15);  // It did wait; how long is not judged further.
  EXPECT_TRUE(SameValues(dst, before));
}

TEST_P(TransportConformanceTest, OlderVersionDoesNotSatisfyAWait) {
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  auto first = PublishAsync(*t.publisher, 1, MakeWeights(1));
  NamedTensors dst = MakeReceiver(MakeWeights(1));
  ASSERT_TRUE(t.receiver->Receive(1, dst, absl::Seconds(30)).ok());
  ASSERT_TRUE(first.get().ok());
  absl::StatusOr<v1::WeightSyncStats> got =
      t.receiver->Receive(2, dst, absl::Milliseconds(100));
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find(">= 2"), std::string::npos)
      << got.status();
}

// A version beyond the next will never be published: refused at once, not
// waited for (30 s); the link stays usable for the next version.
TEST_P(TransportConformanceTest, VersionNeverToBePublishedIsRefusedAtOnce) {
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  auto first = PublishAsync(*t.publisher, 1, MakeWeights(1));
  NamedTensors dst = MakeReceiver(MakeWeights(1));
  ASSERT_TRUE(t.receiver->Receive(1, dst, absl::Seconds(30)).ok());
  ASSERT_TRUE(first.get().ok());
  absl::StatusOr<v1::WeightSyncStats> got = t.receiver->Receive(1 << 30, dst, absl::Seconds(30));
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition) << got.status();
  EXPECT_NE(got.status().message().find("will never be published"), std::string::npos);
  auto second = PublishAsync(*t.publisher, 2, MakeWeights(2));
  ASSERT_TRUE(t.receiver->Receive(2, dst, absl::Seconds(30)).ok());
  ASSERT_TRUE(second.get().ok());
}

TEST_P(TransportConformanceTest, CorruptBucketIsDataLossAndLeavesDstAlone) {
  if (!GetParam().corrupt) GTEST_SKIP() << "transport cannot inject corruption";
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  ASSERT_TRUE(t.publisher->Publish(1, MakeWeights(1)).ok());
  ASSERT_TRUE(GetParam().corrupt(t, 1).ok());
  NamedTensors dst = MakeReceiver(MakeWeights(1));
  const NamedTensors before = Clone(dst);
  absl::StatusOr<v1::WeightSyncStats> got =
      t.receiver->Receive(1, dst, absl::Seconds(30));
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("bucket 1"), std::string::npos)
      << got.status();
  EXPECT_TRUE(SameValues(dst, before));
}

TEST_P(TransportConformanceTest, MismatchIsFailedPreconditionAndAllOrNothing) {
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  const NamedTensors src = MakeWeights(1);
  auto published = PublishAsync(*t.publisher, 1, src);

  struct Case {
    std::string what;
    NamedTensors dst;
  };
  std::vector<Case> cases;
  NamedTensors shape = MakeReceiver(src);
  shape[3].second = torch::zeros({8}, torch::kByte);  // "mask" is [7].
  cases.push_back({"mask", shape});
  NamedTensors dtype = MakeReceiver(src);
  dtype[1].second = torch::zeros({100}, torch::kFloat);  // Published double.
  cases.push_back({"layer0.bias", dtype});
  NamedTensors missing = MakeReceiver(src);
  missing.pop_back();  // The receiver lacks "transposed".
  cases.push_back({"transposed", missing});
  NamedTensors extra = MakeReceiver(src);
  extra.emplace_back("lm_head.weight", torch::zeros({4}));
  cases.push_back({"lm_head.weight", extra});

  for (Case& c : cases) {
    const NamedTensors before = Clone(c.dst);
    absl::StatusOr<v1::WeightSyncStats> got =
        t.receiver->Receive(1, c.dst, absl::Seconds(30));
    EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition) << c.what;
    EXPECT_NE(got.status().message().find("'" + c.what + "'"),
              std::string::npos)
        << got.status();
    EXPECT_TRUE(SameValues(c.dst, before)) << c.what;
  }
  EXPECT_TRUE(published.get().ok());
}

TEST_P(TransportConformanceTest, ReceiverSeesTheNewestVersion) {
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  // The driver publishes the version before the one a receiver asks for:
  // 2 before anyone asks for 3 (3 asked for while 1 is the newest is
  // refused: it will never be published).
  NamedTensors dst = MakeReceiver(MakeWeights(3));
  for (int64_t v = 1; v <= 2; ++v) {
    auto published = PublishAsync(*t.publisher, v, MakeWeights(v));
    ASSERT_TRUE(t.receiver->Receive(v, dst, absl::Seconds(30)).ok()) << v;
    ASSERT_TRUE(published.get().ok()) << v;
  }
  // Waiting for 3 while 2 is staged yields exactly version 3.
  auto publisher = PublishAsync(*t.publisher, 3, MakeWeights(3));
  absl::StatusOr<v1::WeightSyncStats> got = t.receiver->Receive(3, dst, absl::Seconds(30));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version(), 3);
  EXPECT_TRUE(SameValues(dst, MakeWeights(3)));
  EXPECT_TRUE(publisher.get().ok());
  // A later receive for an older minimum still gets the newest.
  got = t.receiver->Receive(1, dst, absl::Seconds(30));
  if (got.ok()) EXPECT_EQ(got->version(), 3);
}

// A receiver may hand its dst the received memory instead of copying
// (LoadInto with adopt): tensors that received an earlier version keep it
// while later versions arrive into other tensors.
TEST_P(TransportConformanceTest, EarlierDstKeepsItsVersion) {
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  NamedTensors first = MakeReceiver(MakeWeights(1));
  NamedTensors later = MakeReceiver(MakeWeights(1));
  for (int64_t v = 1; v <= 4; ++v) {
    ASSERT_TRUE(t.publisher->Publish(v, MakeWeights(v)).ok());
    absl::StatusOr<v1::WeightSyncStats> got =
        t.receiver->Receive(v, v == 1 ? first : later, absl::Seconds(30));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(SameValues(v == 1 ? first : later, MakeWeights(v))) << "version " << v;
  }
  EXPECT_TRUE(SameValues(first, MakeWeights(1)));
  // Writing into a received tensor does not disturb the next receive.
  for (auto& [name, tensor] : later) {
    if (tensor.numel() > 0 && tensor.scalar_type() == torch::kFloat) tensor.fill_(-5);
  }
  ASSERT_TRUE(t.publisher->Publish(5, MakeWeights(5)).ok());
  ASSERT_TRUE(t.receiver->Receive(5, later, absl::Seconds(30)).ok());
  EXPECT_TRUE(SameValues(later, MakeWeights(5)));
  EXPECT_TRUE(SameValues(first, MakeWeights(1)));
}

TEST_P(TransportConformanceTest, WaitingReceiverGetsALaterPublish) {
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  NamedTensors dst = MakeReceiver(MakeWeights(5));
  absl::StatusOr<v1::WeightSyncStats> got;
  std::jthread receiver_thread([&] { got = t.receiver->Receive(5, dst, absl::Seconds(30)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::jthread publisher_thread([&t] {
    EXPECT_TRUE(t.publisher->Publish(5, MakeWeights(5)).ok());
  });
  publisher_thread.join();
  receiver_thread.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version(), 5);
  EXPECT_TRUE(SameValues(dst, MakeWeights(5)));
}

TEST_P(TransportConformanceTest, EveryReceiveIsOneWholeVersion) {
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  constexpr int64_t kVersions = 30;
  // A failed assertion below returns while the publisher runs: it stops and
  // is joined (std::jthread), and the test fails instead of the process
  // ending.
  std::jthread publisher([&t](std::stop_token stop) {
    for (int64_t v = 1; v <= kVersions && !stop.stop_requested(); ++v) {
      EXPECT_TRUE(t.publisher->Publish(v, MakeWeights(v)).ok()) << v;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  NamedTensors dst = MakeReceiver(MakeWeights(1));
  int64_t next = 1;
  int receives = 0;
  while (next <= kVersions) {
    absl::StatusOr<v1::WeightSyncStats> got =
        t.receiver->Receive(next, dst, absl::Seconds(30));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_GE(got->version(), next);
    ASSERT_TRUE(SameValues(dst, MakeWeights(got->version())))
        << "version " << got->version();
    next = got->version() + 1;
    ++receives;
  }
  publisher.join();
  EXPECT_LE(receives, kVersions);
}

// A receiver outlives its publisher: it keeps what it received, and its
// next wait ends by the deadline with the publisher named gone or late.
TEST_P(TransportConformanceTest, PublisherGoneIsAnErrorByTheDeadline) {
  TransportEnds t = Make(kBucketBytes);
  ASSERT_NE(t.publisher, nullptr);
  ASSERT_TRUE(t.publisher->Publish(1, MakeWeights(1)).ok());
  NamedTensors dst = MakeReceiver(MakeWeights(1));
  ASSERT_TRUE(t.receiver->Receive(1, dst, absl::Seconds(30)).ok());
  t.publisher.reset();
  absl::StatusOr<v1::WeightSyncStats> got = t.receiver->Receive(2, dst, absl::Seconds(1));
  EXPECT_TRUE(got.status().code() == StatusCode::kUnavailable ||
              got.status().code() == StatusCode::kDeadlineExceeded)
      << got.status();
  EXPECT_TRUE(SameValues(dst, MakeWeights(1)));
}

}  // namespace trellis::weightsync::conformance
