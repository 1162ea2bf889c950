// Validation of algorithm distill (JobConfig.distill): each rule refused
// with the field it names, and a complete distill job accepted.

#include <string>

#include "absl/strings/str_cat.h"
#include "config/job_config.h"
#include "config/recipe.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::config {
namespace {

using ::testing::HasSubstr;

// A distill job whose teacher, of `teacher`'s fields, comes from
// teacher.safetensors, with `extra` YAML appended under distill:.
absl::Status ValidateDistill(const std::string& extra,
                             const std::string& teacher = "n_layers: 4, d_model: 192") {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml(
      absl::StrCat(
          "algorithm: distill\ndistill:\n  teacher: {init_checkpoint: teacher.safetensors, ",
          teacher, "}\n", extra),
      "job.yaml");
  return job.ok() ? ValidateJob(*job) : job.status();
}

void ExpectRefused(const absl::Status& s, const std::string& message) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(message));
}

TEST(DistillConfig, ACompleteJobIsAccepted) {
  EXPECT_TRUE(ValidateDistill("").ok()) << ValidateDistill("");
  EXPECT_TRUE(ValidateDistill("  divergence: jsd\n  jsd_beta: 0.1\n  reward_weight: 0.5\n").ok());
}

TEST(DistillConfig, ATeacherWithoutWeightsIsRefused) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml("algorithm: distill\n", "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectRefused(ValidateJob(*job),
                "distill.teacher: must be given path (a Hugging Face directory) or "
                "init_checkpoint (a Trellis safetensors file), found neither");
}

TEST(DistillConfig, JsdBetaMustBeInsideTheUnitInterval) {
  ExpectRefused(ValidateDistill("  jsd_beta: 0\n"), "distill.jsd_beta: must be in (0, 1), found 0");
  ExpectRefused(ValidateDistill("  jsd_beta: 1\n"), "distill.jsd_beta: must be in (0, 1), found 1");
}

TEST(DistillConfig, WeightsMustBeNonNegativeAndNotBothZero) {
  ExpectRefused(ValidateDistill("  divergence_weight: -1\n"), "distill.divergence_weight");
  ExpectRefused(ValidateDistill("  reward_weight: -0.5\n"), "distill.reward_weight");
  ExpectRefused(ValidateDistill("  divergence_weight: 0\n"),
                "distill.divergence_weight: must be > 0 or distill.reward_weight > 0");
  EXPECT_TRUE(ValidateDistill("  divergence_weight: 0\n  reward_weight: 1\n").ok());
}

TEST(DistillConfig, TheTeachersShapeIsCheckedUnderItsOwnName) {
  ExpectRefused(ValidateDistill("", "n_heads: 3"),
                "distill.teacher.d_model: must be divisible by distill.teacher.n_heads (3)");
  ExpectRefused(ValidateDistill("", "max_seq_len: 8"),
                "distill.teacher.max_seq_len: must be >= model.max_seq_len");
}

TEST(DistillConfig, OtherAlgorithmsIgnoreTheDistillSection) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml("distill: {jsd_beta: 0}\n", "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(ValidateJob(*job).ok()) << ValidateJob(*job);
}

TEST(DistillConfig, TheReferenceServesTheTeacher) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml(
      "algorithm: distill\ndistill: {teacher: {init_checkpoint: t.safetensors, n_layers: 5}}\n",
      "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(ReferenceIsTeacher(*job));
  EXPECT_EQ(ReferenceModel(*job).n_layers(), 5);
  job->set_algorithm("grpo");
  EXPECT_FALSE(ReferenceIsTeacher(*job));
  EXPECT_EQ(ReferenceModel(*job).n_layers(), job->model().n_layers());
}

}  // namespace
}  // namespace trellis::config
