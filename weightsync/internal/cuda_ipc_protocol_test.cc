// The CUDA IPC transport's announcement and the store answers, which need
// no GPU: run everywhere.

#include "weightsync/internal/cuda_ipc_protocol.h"

#include <torch/torch.h>

#include <string>

#include "gtest/gtest.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/store_protocol.h"
#include "weightsync/internal/wire.h"

namespace trellis::weightsync::internal::cuda_ipc {
namespace {

using ::absl::StatusCode;

// Three tensors in two buckets of at most 4 KiB, each bucket with a made-up handle
// and address.
Announcement Sample() {
  NamedTensors tensors = {{"a", torch::arange(1000, torch::kFloat)},
                          {"b", torch::ones({3, 2}, torch::kDouble)},
                          {"c", torch::zeros({5}, torch::kByte)}};
  absl::StatusOr<BucketSet> set = PlanBuckets(tensors, 4096);
  EXPECT_TRUE(set.ok()) << set.status();
  set->version = 7;
  Announcement a;
  a.process_nonce = 0x1234567890abcdefULL;
  for (size_t i = 0; i < a.device.size(); ++i) a.device[i] = static_cast<char>(i * 17);
  for (size_t i = 0; i < set->buckets.size(); ++i) {
    DeviceBucket b;
    b.handle.fill(static_cast<char>('A' + i));
    b.address = 0x7f0000000000ULL + i * 4096;
    a.buckets.push_back(b);
  }
  a.header = EncodeHeader(*set);
  return a;
}

TEST(CudaIpcProtocolTest, AnnouncementRoundTrips) {
  const Announcement a = Sample();
  ASSERT_EQ(a.buckets.size(), 2u);
  absl::StatusOr<Announcement> got = DecodeAnnouncement(EncodeAnnouncement(a));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->process_nonce, a.process_nonce);
  EXPECT_EQ(got->device, a.device);
  ASSERT_EQ(got->buckets.size(), a.buckets.size());
  for (size_t i = 0; i < a.buckets.size(); ++i) {
    EXPECT_EQ(got->buckets[i].handle, a.buckets[i].handle);
    EXPECT_EQ(got->buckets[i].address, a.buckets[i].address);
  }
  EXPECT_EQ(got->header.SerializeAsString(), a.header.SerializeAsString());
  absl::StatusOr<BucketSet> layout = AnnouncedLayout(*got);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->version, 7);
  ASSERT_EQ(layout->manifest.size(), 3u);
  EXPECT_EQ(layout->manifest[2].name, "c");
  EXPECT_EQ(layout->manifest[2].bucket, 1);  // "a" and "b" fill bucket 0.
  EXPECT_TRUE(layout->buckets.empty());      // The receiver maps its own.
}

TEST(CudaIpcProtocolTest, TruncatedAnnouncementIsDataLoss) {
  const std::string bytes = EncodeAnnouncement(Sample());
  for (size_t n : {size_t{0}, size_t{20}, size_t{40}, size_t{100}}) {
    absl::StatusOr<Announcement> got = DecodeAnnouncement(bytes.substr(0, n));
    EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << n << " bytes";
    EXPECT_NE(got.status().message().find("weightsync cuda_ipc"), std::string::npos);
  }
}

TEST(CudaIpcProtocolTest, BucketCountUnlikeTheHeadersIsDataLoss) {
  Announcement a = Sample();
  a.buckets.pop_back();
  absl::StatusOr<Announcement> got = DecodeAnnouncement(EncodeAnnouncement(a));
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("1 device buckets but its header 2"), std::string::npos)
      << got.status();
}

TEST(CudaIpcProtocolTest, BadLayoutIsDataLossNamingWhat) {
  Announcement a = Sample();
  a.buckets[1].address = 0;
  EXPECT_NE(AnnouncedLayout(a).status().message().find("bucket 1 has no device address"),
            std::string::npos);
  a = Sample();
  a.header.mutable_tensors(0)->set_offset(1 << 20);  // Outside bucket 0.
  absl::StatusOr<BucketSet> got = AnnouncedLayout(a);
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("'a'"), std::string::npos) << got.status();
}

TEST(CudaIpcProtocolTest, ProcessNonceIsStableWithinAProcess) {
  EXPECT_EQ(ProcessNonce(), ProcessNonce());
}

TEST(CudaIpcProtocolTest, UuidIsPrintedInHex) {
  DeviceUuid uuid{};
  uuid[0] = static_cast<char>(0xab);
  uuid[15] = 0x01;
  EXPECT_EQ(UuidString(uuid),
            "ab00000000000000000000000000"
            "0001");
}

TEST(StoreProtocolTest, AnswersCarryABodyOrTheError) {
  absl::StatusOr<std::string> body = DecodeAnswer(EncodeAnswer(absl::OkStatus(), "payload"));
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body, "payload");
  absl::StatusOr<std::string> lost =
      DecodeAnswer(EncodeAnswer(absl::DataLossError("bucket 1 failed"), "ignored"));
  EXPECT_EQ(lost.status(), absl::DataLossError("bucket 1 failed"));
  // The publisher closing is, to the receiver, the publisher gone.
  EXPECT_EQ(DecodeAnswer(EncodeAnswer(absl::CancelledError("closing"), "")).status().code(),
            StatusCode::kUnavailable);
}

TEST(StoreProtocolTest, Int64sRoundTripAndShortInputReadsZero) {
  const std::vector<uint8_t> b = Int64s({-3, int64_t{1} << 40});
  EXPECT_EQ(Int64At(b, 0), -3);
  EXPECT_EQ(Int64At(b, 1), int64_t{1} << 40);
  EXPECT_EQ(Int64At(b, 2), 0);
}

}  // namespace
}  // namespace trellis::weightsync::internal::cuda_ipc
