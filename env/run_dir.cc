#include "env/run_dir.h"

#include "absl/strings/str_cat.h"

namespace trellis::env {

std::string CheckpointDir::Optimizer(int rank) const {
  return rank == 0 ? File(kOptimizer) : absl::StrCat(path_, "/optimizer.rank", rank, ".safetensors");
}

std::string RunDir::CheckpointName(int64_t step) { return absl::StrCat("step_", step); }

CheckpointDir RunDir::Checkpoint(int64_t step) const {
  return CheckpointDir(absl::StrCat(Checkpoints(), "/", CheckpointName(step)));
}

CheckpointDir RunDir::CheckpointInProgress(int64_t step) const {
  return CheckpointDir(absl::StrCat(Checkpoints(), "/.tmp_", CheckpointName(step)));
}

}  // namespace trellis::env
