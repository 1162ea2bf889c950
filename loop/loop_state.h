#ifndef TRELLIS_LOOP_LOOP_STATE_H_
#define TRELLIS_LOOP_LOOP_STATE_H_

// What the loop carries across a resume, besides the learner's files
// (written and read by the run's checkpoints).

#include <cstdint>
#include <string>
#include <vector>

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
  // Partial rollout: the RL stream positions of the groups in flight at
  // the checkpoint (drawn before train_position, not yet trained); the
  // resumed run starts them afresh. In the prompt account's in_flight.
  std::vector<uint64_t> train_in_flight;
  ledger::EvalMetrics eval_before;
  // The RL prompt stream's account after the steps completed (prompts the
  // asynchronous pipeline drew ahead are replayed: not in it; those of
  // train_in_flight are).
  ledger::PromptAccount prompt_account;
  // Ledger::ExportState() at the checkpoint.
  std::string ledger_state;
};

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_LOOP_STATE_H_
