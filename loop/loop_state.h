#ifndef TRELLIS_LOOP_LOOP_STATE_H_
#define TRELLIS_LOOP_LOOP_STATE_H_

// What the loop carries across a resume, besides the learner's files
// (written and read by the run's checkpoints).

#include <cstdint>
#include <string>

#include "ledger/ledger.h"

namespace trellis::loop {

struct LoopState {
  // Steps completed; the resumed run starts at this step.
  int64_t next_step = 0;
  // The learner's policy version at the checkpoint.
  int64_t policy_version = 0;
  // runtime.seed of the run (a resume with another seed is refused).
  uint64_t seed = 0;
  // data::PromptStream positions: SFT examples and RL prompts.
  uint64_t sft_position = 0;
  uint64_t train_position = 0;
  ledger::EvalMetrics eval_before;
  // The RL prompt stream's account after the steps completed (prompts the
  // asynchronous pipeline drew ahead are replayed: not in it).
  ledger::PromptAccount prompt_account;
  // Ledger::ExportState() at the checkpoint.
  std::string ledger_state;
};

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_LOOP_STATE_H_
