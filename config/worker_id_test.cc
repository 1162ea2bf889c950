#include "config/worker_id.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "config/choice.h"
#include "trellis/v1/job.pb.h"

namespace trellis::config {
namespace {

using ::testing::HasSubstr;

TEST(WorkerIdTest, WritesRoleDashIndex) {
  EXPECT_EQ(WorkerId(v1::LEARNER).ToString(), "learner-0");
  EXPECT_EQ(WorkerId(v1::ACTOR, 3).ToString(), "actor-3");
  EXPECT_EQ(WorkerId(v1::REFERENCE).ToString(), "reference-0");
  EXPECT_EQ(WorkerId(v1::VERIFIER).ToString(), "verifier-0");
  EXPECT_EQ(WorkerId(v1::SCHEDULER).ToString(), "scheduler");
  EXPECT_EQ(WorkerId(v1::ACTOR, 12).ToString(), "actor-12");
}

TEST(WorkerIdTest, ParsesWhatItWrites) {
  for (const WorkerId& id : {WorkerId(v1::LEARNER, 1), WorkerId(v1::ACTOR, 10),
                             WorkerId(v1::REFERENCE), WorkerId(v1::VERIFIER),
                             WorkerId(v1::SCHEDULER)}) {
    absl::StatusOr<WorkerId> back = WorkerId::Parse(id.ToString());
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, id);
  }
}

TEST(WorkerIdTest, RefusesOtherTextNamingIt) {
  for (const char* bad : {"", "actor", "actor-", "actor-x", "actor--1", "actor-01", "Actor-1",
                          "critic-0", "scheduler-0", "role_unspecified-0", " actor-1"}) {
    absl::StatusOr<WorkerId> id = WorkerId::Parse(bad);
    ASSERT_FALSE(id.ok()) << bad;
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(id.status().message()),
                HasSubstr(absl::StrCat("worker id \"", bad, "\": expected <role>-<index>")));
  }
}

TEST(ChoiceTest, NamesValuesInLowercaseAndReadsAnyCase) {
  EXPECT_EQ(ChoiceName(v1::MemoryConfig::BF16), "bf16");
  EXPECT_EQ(ChoiceName(v1::LoraConfig::GATE_PROJ), "gate_proj");
  EXPECT_EQ(ParseChoice<v1::DpoConfig::ReferenceLogprobs>("on_the_fly"),
            v1::DpoConfig::ON_THE_FLY);
  EXPECT_EQ(ParseChoice<v1::OptimizerConfig::Rule>(" SGD "), v1::OptimizerConfig::SGD);
  EXPECT_EQ(ParseChoice<v1::OptimizerConfig::Rule>("adam"), std::nullopt);
  EXPECT_EQ(ChoiceList<v1::VerifierConfig::Sandbox>(), "one of auto, bwrap, rlimits");
  EXPECT_EQ(ChoiceList<v1::LossAggregation>(), "one of token_mean, sequence_mean");
}

}  // namespace
}  // namespace trellis::config
