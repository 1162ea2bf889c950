#ifndef TRELLIS_LOOP_EVAL_ANSWERS_H_
#define TRELLIS_LOOP_EVAL_ANSWERS_H_

// What a rollout evaluation's model said, kept in the run directory:
// RUN/eval/<label>.jsonl (env::RunDir::EvalAnswers; label "before",
// "step_<N>" or "after"), one JSON object a line per held-out item, in the
// held-out set's order:
//
//   {"eval":"after","index":0,"prompt_id":4,"prompt":"4+1=","response":"5",
//    "answer":"5","verdict":"correct","reward":1.0,"scored":true}
//
// "prompt" is the text the model was given (a chat's rendering with the
// generation prompt); "reward" is the one the run used (after the reward
// rule); "detail" the verifier's reason, when it gives one. An item the verifier still failed on after eval.verify_retries
// ("verdict" error or timeout) has "scored": false and its "failure" (as
// the verifier gave it, e.g. "deadline"): it counts for nothing, and the
// evaluation is incomplete (no accuracy). The file is written whole when
// the evaluation ends, under the run directory's modes (0600 or 0640), so
// a resumed run that repeats an evaluation replaces its file instead of
// adding to it. In a launched run the scheduler, which runs the loop,
// writes it.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "env/env.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::loop {

struct EvalAnswer {
  uint64_t prompt_id = 0;
  std::string prompt;
  std::string response;
  std::string answer;
  v1::VerifyResult result;
};

// True when the verifier judged the item (its verdict is neither ERROR nor
// TIMEOUT).
bool Scored(const v1::VerifyResult& result);

// One item's line (no newline).
std::string EvalAnswerLine(const std::string& label, int64_t index, const EvalAnswer& answer);

// Writes RUN_DIR/eval/<label>.jsonl whole or not at all; the path is kept
// inside run_dir (env/confined_path.h: a symbolic link out of it is
// refused). Errors name the file.
[[nodiscard]] absl::Status WriteEvalAnswers(env::Env* env, const std::string& run_dir,
                                            const std::string& label,
                                            const std::vector<EvalAnswer>& answers);

// The labels of RUN_DIR/eval's files in the order the run wrote them:
// before, step_<N> by N, after (empty when there is no eval folder).
[[nodiscard]] absl::StatusOr<std::vector<std::string>> EvalLabels(env::Env* env,
                                                                  const std::string& run_dir);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_EVAL_ANSWERS_H_
