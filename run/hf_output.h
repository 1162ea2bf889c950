#ifndef TRELLIS_RUN_HF_OUTPUT_H_
#define TRELLIS_RUN_HF_OUTPUT_H_

// A finished run's policy as a Hugging Face directory, for jobs that start
// from one (model.path).

#include "absl/status/status.h"
#include "env/run_dir.h"
#include "learner/learner_worker.h"
#include "ledger/ledger.h"
#include "text/tokenizer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::run {

// Writes RUN/hf (env::RunDir::kHfPolicy): RUN/policy.safetensors as
// model.path's family in its stored dtype (model/hf_export.h), with its
// tokenizer files and `tokenizer`'s special ids in config.json and
// generation_config.json (under LoRA, the merged weights policy.safetensors
// holds). Under LoRA also RUN/hf_adapter (env::RunDir::kHfAdapter): the
// adapters in PEFT's format over model.path, read from a checkpoint of
// `learner` written to a temporary directory of RUN and removed after.
// Each export holds the weights twice while it runs (as read, and in the
// model it writes from): `ledger` counts them as the scheduler's workspace.
// REQUIRES: job.model().path() is set.
[[nodiscard]] absl::Status ExportHfPolicy(const v1::JobConfig& job,
                                          const text::Tokenizer& tokenizer, const env::RunDir& run,
                                          learner::LearnerWorker& learner, ledger::Ledger& ledger);

}  // namespace trellis::run

#endif  // TRELLIS_RUN_HF_OUTPUT_H_
