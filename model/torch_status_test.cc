#include "model/torch_status.h"

#include <torch/torch.h>

#include <new>
#include <stdexcept>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/testing/failing_allocator.h"

namespace trellis::model {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

absl::Status Thrown(const std::function<void()>& fn) {
  return TorchEdge("worker-3").Call("Step", [&] {
    fn();
    return absl::OkStatus();
  });
}

TEST(TorchStatusTest, FailedLibTorchCheckIsInternal) {
  absl::Status s = Thrown([] { torch::ones({2}).view({3}); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(std::string(s.message()),
              StartsWith("worker-3 Step: shape '[3]' is invalid for input of size 2"));
}

TEST(TorchStatusTest, C10ErrorIsInternalWithoutBacktrace) {
  absl::Status s = Thrown([] { TORCH_CHECK(false, "rows must match"); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_EQ(s.message(), "worker-3 Step: rows must match");
}

TEST(TorchStatusTest, CpuAllocatorRefusingIsResourceExhausted) {
  // 2^46 floats: more than any machine this runs on has.
  absl::Status s = Thrown([] { torch::empty({int64_t{1} << 46}); });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith("worker-3 Step: out of memory: [enforce fail at"));
}

TEST(TorchStatusTest, OutOfMemoryErrorIsResourceExhausted) {
  absl::Status s;
  {
    testing::FailingCpuAllocator failing;
    s = Thrown([] { torch::zeros({4}); });
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("injected out of memory"));
  // The allocator is back: tensors work again.
  EXPECT_EQ(torch::ones({4}).sum().item<float>(), 4.0f);
}

TEST(TorchStatusTest, OtherExceptionsByKind) {
  EXPECT_EQ(Thrown([] { throw std::bad_alloc(); }).code(), absl::StatusCode::kResourceExhausted);
  absl::Status runtime = Thrown([] { throw std::runtime_error("disk on fire"); });
  EXPECT_EQ(runtime.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(runtime.message(), "worker-3 Step: disk on fire");
  EXPECT_EQ(Thrown([] { throw 7; }).code(), absl::StatusCode::kUnknown);
}

TEST(TorchStatusTest, ResultsPassThrough) {
  absl::StatusOr<int> value = TorchEdge("w").Call("Get", [] { return absl::StatusOr<int>(5); });
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 5);
  absl::Status refused = TorchEdge("w").Call("Get", [] { return absl::NotFoundError("x"); });
  EXPECT_EQ(refused, absl::NotFoundError("x"));
}

}  // namespace
}  // namespace trellis::model
