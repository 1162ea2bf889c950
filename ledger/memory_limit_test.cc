// memory.process_memory_limit_bytes at run time (ledger/memory_limit.h),
// with a fake process sampler: under the limit nothing happens; a peak past
// it is ResourceExhausted naming the process, the peak, the limit and the
// largest objects, largest first.
#include "ledger/memory_limit.h"

#include "env/testing/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ledger/ledger.h"
#include "ledger/process_memory.h"

namespace trellis::ledger {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

class MemoryLimitTest : public ::testing::Test {
 protected:
  MemoryLimitTest() {
    SetProcessSamplerForTesting([this] { return next_; });
  }
  ~MemoryLimitTest() override { SetProcessSamplerForTesting(nullptr); }

  void SetPeak(int64_t bytes) {
    next_.resident_bytes = bytes;
    next_.peak_resident_bytes = bytes;
  }

  ProcessSample next_;
};

TEST_F(MemoryLimitTest, APeakPastTheLimitNamesTheProcessAndItsLargestObjects) {
  env::testing::FakeEnv env;
  Ledger ledger(&env);
  SetPeak(100 * kMiB);
  ledger.RecordObject("learner-0", Object::kParameters, 40 * kMiB, Stage::kLoad);
  ledger.RecordObject("learner-0", Object::kOptimizerState, 80 * kMiB, Stage::kUpdate);
  ledger.RecordObject("learner-0", Object::kGradients, 20 * kMiB, Stage::kUpdate);
  ledger.RecordObject("learner-0", Object::kActivations, 10 * kMiB, Stage::kUpdate);
  EXPECT_TRUE(CheckProcessMemoryLimit(ledger, 0, "learner-0").ok());
  EXPECT_TRUE(CheckProcessMemoryLimit(ledger, 100 * kMiB, "learner-0").ok());

  SetPeak(300 * kMiB);
  const absl::Status s = CheckProcessMemoryLimit(ledger, 256 * kMiB, "learner-0");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("learner-0: peak resident memory 300.0 MiB (314572800 "
                                     "bytes) passed memory.process_memory_limit_bytes 256.0 MiB"));
  // The three largest, largest first; activations are the fourth.
  EXPECT_THAT(s.message(), HasSubstr("its largest objects: optimizer_state 80.0 MiB, "
                                     "parameters 40.0 MiB, gradients 20.0 MiB ("));
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("activations")));
}

TEST_F(MemoryLimitTest, TheHighWaterMarkKeepsAPeakBetweenChecks) {
  env::testing::FakeEnv env;
  Ledger ledger(&env);
  next_.resident_bytes = 10 * kMiB;
  next_.peak_resident_bytes = 500 * kMiB;  // reached and freed since the last look
  const absl::Status s = CheckProcessMemoryLimit(ledger, 256 * kMiB, "actor-1");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("actor-1: peak resident memory 500.0 MiB"));
  EXPECT_THAT(s.message(), HasSubstr("its largest objects: none reported"));
}

}  // namespace
}  // namespace trellis::ledger
