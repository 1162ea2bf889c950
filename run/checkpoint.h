#ifndef TRELLIS_RUN_CHECKPOINT_H_
#define TRELLIS_RUN_CHECKPOINT_H_

// Run checkpoints for exact resume, written and read through an env::Env
// (env/run_dir.h names the files). Layout of a run directory:
//
//   RUN/checkpoints/step_<N>/      after N GRPO steps
//     weights.safetensors          the learner's (LearnerWorker::SaveCheckpoint)
//     optimizer.safetensors        both phases' AdamW state and step counts
//     rng.safetensors              LibTorch's global CPU generator state
//     state.json                   LoopState, the format version, and the
//                                  size and FNV-1a-64 of every file above
//                                  and of RUN/reference.safetensors
//   RUN/checkpoints/latest         "step_<N>\n", replaced last
//
// A checkpoint is written into checkpoints/.tmp_step_<N>, every file
// fsynced, then renamed to step_<N>; `latest` is written to a temporary
// file and renamed over the old one only after that. A run killed at any
// point leaves `latest` naming a complete checkpoint (or no `latest`).

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "env/env.h"
#include "ledger/ledger.h"
#include "loop/loop_state.h"

namespace trellis::run {

// state.json's "format"; a checkpoint with another is refused.
inline constexpr int kCheckpointFormat = 1;

using loop::LoopState;

// Writes RUN/checkpoints/step_<state.next_step> as above through `env`.
// `write_learner` writes the learner's files into the directory it is
// given. A failure (a full disk: ResourceExhausted naming the file) leaves
// `latest` naming the previous checkpoint.
[[nodiscard]] absl::Status WriteCheckpoint(
    env::Env* env, const std::string& run_dir, const LoopState& state,
    const std::function<absl::Status(const std::string& dir)>& write_learner);

struct Checkpoint {
  std::string dir;  // RUN/checkpoints/step_<N>
  LoopState state;
};

// Finds the checkpoint RUN/checkpoints/latest names and checks it: the
// format version, and that every listed file exists with its recorded size
// and hash. Restores nothing. Fails with NotFound when there is no
// `latest`, DataLoss when a part is missing, truncated or altered, and
// FailedPrecondition for another format version; the message names the
// part and says why.
[[nodiscard]] absl::StatusOr<Checkpoint> ReadLatestCheckpoint(env::Env* env,
                                                             const std::string& run_dir);

// Sets LibTorch's global CPU generator to the state in dir/rng.safetensors.
[[nodiscard]] absl::Status RestoreGlobalRng(const std::string& dir);

}  // namespace trellis::run

#endif  // TRELLIS_RUN_CHECKPOINT_H_
