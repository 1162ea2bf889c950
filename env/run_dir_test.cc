#include "env/run_dir.h"

#include "gtest/gtest.h"

namespace trellis::env {
namespace {

TEST(RunDirTest, NamesEveryFileOfARunDirectory) {
  const RunDir run("/runs/a");
  EXPECT_EQ(run.JobYaml(), "/runs/a/job.yaml");
  EXPECT_EQ(run.Ledger(), "/runs/a/ledger.jsonl");
  EXPECT_EQ(run.Summary(), "/runs/a/summary.json");
  EXPECT_EQ(run.Reference(), "/runs/a/reference.safetensors");
  EXPECT_EQ(run.Policy(), "/runs/a/policy.safetensors");
  EXPECT_EQ(run.LaunchProcesses(), "/runs/a/launch/processes.tsv");
  EXPECT_EQ(run.LatestCheckpoint(), "/runs/a/checkpoints/latest");
  EXPECT_EQ(RunDir::CheckpointName(12), "step_12");
  EXPECT_EQ(run.Checkpoint(12).path(), "/runs/a/checkpoints/step_12");
  EXPECT_EQ(run.CheckpointInProgress(12).path(), "/runs/a/checkpoints/.tmp_step_12");
  EXPECT_EQ(run.Checkpoint(3).State(), "/runs/a/checkpoints/step_3/state.json");
  EXPECT_EQ(run.Checkpoint(3).Optimizer(0), "/runs/a/checkpoints/step_3/optimizer.safetensors");
  EXPECT_EQ(run.Checkpoint(3).Optimizer(2),
            "/runs/a/checkpoints/step_3/optimizer.rank2.safetensors");
}

}  // namespace
}  // namespace trellis::env
