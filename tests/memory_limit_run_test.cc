// memory.process_memory_limit_bytes on an embedded run (`trellis run`, every
// role in one process), with a fake process sampler in place of /proc: a
// measured peak past the limit stops the run at the end of its first step
// with ResourceExhausted naming the process and its largest objects; a job
// whose one process (every role) is priced above the limit is refused
// before any step, though each launched process would fit.

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "config/rank_memory.h"
#include "ledger/process_memory.h"
#include "run/embedded_job.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

class MemoryLimitRunTest : public ::testing::Test {
 protected:
  MemoryLimitRunTest() {
    ledger::SetProcessSamplerForTesting([] {
      ledger::ProcessSample sample;
      sample.resident_bytes = 512 * kMiB;
      sample.peak_resident_bytes = 512 * kMiB;
      return sample;
    });
  }
  ~MemoryLimitRunTest() override { ledger::SetProcessSamplerForTesting(nullptr); }
};

TEST_F(MemoryLimitRunTest, AMeasuredPeakPastTheLimitStopsTheRunAfterItsFirstStep) {
  const fs::path dir = fs::path(::testing::TempDir()) / "memory_limit_run";
  fs::remove_all(dir);
  v1::JobConfig job = testing_util::TinyJob();
  job.mutable_sft()->set_steps(0);
  job.mutable_grpo()->set_steps(3);
  job.mutable_memory()->set_process_memory_limit_bytes(256 * kMiB);
  std::ostringstream progress;
  const absl::Status s = run::RunEmbeddedJob(job, dir.string(), progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("the process running the loop (under `trellis run`, every "
                                     "role): peak resident memory 512.0 MiB"));
  EXPECT_THAT(s.message(), HasSubstr("passed memory.process_memory_limit_bytes 256.0 MiB"));
  EXPECT_THAT(s.message(), HasSubstr("its largest objects: "));
  EXPECT_THAT(s.message(), HasSubstr("parameters "));
  EXPECT_EQ(testing_util::StepRecords(dir).size(), 1u);
}

// Priced as launched processes it fits; as `trellis run`'s one process,
// every role in it, it does not.
TEST_F(MemoryLimitRunTest, AJobWhoseOneProcessIsPricedAboveTheLimitIsRefusedBeforeAnyStep) {
  const fs::path dir = fs::path(::testing::TempDir()) / "memory_limit_priced";
  fs::remove_all(dir);
  v1::JobConfig job = testing_util::TinyJob();
  double launched = 0;
  for (const config::ProcessPrice& p :
       config::PriceProcesses(job, config::ProcessLayout::kLaunched, 0)) {
    launched = std::max(launched, p.bytes);
  }
  const int64_t limit = static_cast<int64_t>(launched) + 1;
  ASSERT_GT(config::PriceProcesses(job, config::ProcessLayout::kEmbedded, 0)[0].bytes, limit);
  job.mutable_memory()->set_process_memory_limit_bytes(limit);
  std::ostringstream progress;
  const absl::Status s = run::RunEmbeddedJob(job, dir.string(), progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("memory.process_memory_limit_bytes: the one process of "
                                     "`trellis run` (every role) needs at least "));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("(", limit, " bytes); `trellis launch` gives "
                                                  "each role")));
  EXPECT_TRUE(testing_util::StepRecords(dir).empty());
}

}  // namespace
}  // namespace trellis
