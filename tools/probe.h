#ifndef TRELLIS_TOOLS_PROBE_H_
#define TRELLIS_TOOLS_PROBE_H_

// `trellis probe JOB.yaml --vary KEY=V1,V2,...`: pressure probes (seeds/001:
// change one input on a small workload and see which object's peak moves).
// Each setting is a short embedded run (a few RL steps, the SFT warm-up cut
// to as many, a small held-out eval) of the job with that one change; the
// probe compares the compositions of one role's peak (attribution.h) across
// the settings and names the pressure object: the object whose bytes at
// the peak moved most from the first setting to the last.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/worker_id.h"
#include "ledger/attribution.h"
#include "trellis/v1/job.pb.h"

namespace trellis::tools {

// Applies one probe setting to `job`. KEY is one of
//   micro_batch    grpo.micro_batch_size (the SFT warm-up's too)
//   seq_len        sampling.max_new_tokens (the RL sequence is prompt + it)
//   accumulation   micro-batches per step: grpo.micro_batch_size becomes
//                  ceil(prompts_per_step x responses_per_prompt / VALUE)
//   optimizer      sft.optimizer.name and grpo.optimizer.name (adamw, sgd)
// or any job field by its dotted path (grpo.optimizer.momentum, ...).
// InvalidArgument naming KEY and VALUE when it does not apply.
[[nodiscard]] absl::Status ApplyProbeSetting(const std::string& key, const std::string& value,
                                             v1::JobConfig* job);

struct ProbeOptions {
  std::string key;
  std::vector<std::string> values;
  // RL steps per setting (the SFT warm-up is cut to at most as many).
  int steps = 3;
  // Held-out prompts each setting evaluates.
  int eval_prompts = 16;
  // Whose peak is compared.
  std::string role = config::WorkerId(v1::LEARNER).ToString();
  // Each setting runs in out_dir/<key>=<value>/.
  std::string out_dir;
};

struct ProbeSetting {
  std::string value;
  std::string dir;
  // The role's peak, attributed.
  ledger::PeakAttribution peak;
  // The whole process's peak and its stage.
  int64_t run_peak_bytes = 0;
  std::string run_peak_stage;
};

struct ObjectMove {
  std::string object;  // "role/object", or "unattributed"
  int64_t first = 0;
  int64_t last = 0;
  int64_t delta() const { return last - first; }
};

struct ProbeResult {
  ProbeOptions options;
  std::vector<ProbeSetting> settings;
  // Every object of the role's peak, largest |delta| first.
  std::vector<ObjectMove> moves;
  // moves[0].object when anything moved, "none" otherwise.
  std::string pressure_object;
};

// Runs every setting; progress lines of each run go to out_dir/<key>=<value>/
// progress.log. Fails on the first setting that fails, naming it.
[[nodiscard]] absl::StatusOr<ProbeResult> RunProbe(const v1::JobConfig& job,
                                                   const ProbeOptions& options);

void PrintProbe(const ProbeResult& result, std::ostream& out);
nlohmann::json ProbeJson(const ProbeResult& result);

}  // namespace trellis::tools

#endif  // TRELLIS_TOOLS_PROBE_H_
