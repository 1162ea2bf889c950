#include "weightsync/fingerprint.h"

#include <ATen/ATen.h>

#include <cstdint>

#include "gtest/gtest.h"

namespace trellis::weightsync {
namespace {

NamedTensors Base() {
  return {{"a.weight", at::arange(12, at::kFloat).view({3, 4})},
          {"b.weight", at::ones({5}, at::kFloat)}};
}

TEST(FingerprintTest, TellsBasesApart) {
  const uint64_t base = Fingerprint(Base());
  EXPECT_EQ(Fingerprint(Base()), base);

  NamedTensors value = Base();
  value[0].second = value[0].second.clone();
  value[0].second[2][3] = 11.5f;
  EXPECT_NE(Fingerprint(value), base);

  NamedTensors name = Base();
  name[1].first = "c.weight";
  EXPECT_NE(Fingerprint(name), base);

  NamedTensors shape = Base();
  shape[0].second = shape[0].second.view({4, 3});
  EXPECT_NE(Fingerprint(shape), base);

  NamedTensors dtype = Base();
  dtype[1].second = at::ones({5}, at::kDouble);
  EXPECT_NE(Fingerprint(dtype), base);

  // Only values count, not the memory layout.
  NamedTensors strided = Base();
  strided[0].second = strided[0].second.t().contiguous().t();
  ASSERT_FALSE(strided[0].second.is_contiguous());
  EXPECT_EQ(Fingerprint(strided), base);
}

TEST(FingerprintTest, TensorRoundTrip) {
  for (uint64_t f : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}, Fingerprint(Base())}) {
    const at::Tensor t = FingerprintTensor(f);
    EXPECT_EQ(t.scalar_type(), at::kLong);
    EXPECT_EQ(t.numel(), 1);
    EXPECT_EQ(FingerprintOf(t), f);
  }
}

}  // namespace
}  // namespace trellis::weightsync
