#ifndef TRELLIS_ENV_RUN_DIR_H_
#define TRELLIS_ENV_RUN_DIR_H_

// Every file name of a run directory, in one place. Layout:
//
//   RUN/lock                     the pid of the process writing the run, which
//                                holds a flock on it (env/run_dir_lock.h)
//   RUN/job.yaml                 the job as resolved, every default filled in
//   RUN/ledger.jsonl             every ledger record (ledger/README.md)
//   RUN/summary.json             the run's summary
//   RUN/tensorboard/             TensorBoard event files (docs/observe.md)
//   RUN/eval/<label>.jsonl       each evaluation's prompts, responses and verdicts
//                                (before, step_<N>, after; loop/eval_answers.h)
//   RUN/reference.safetensors    the reference weights (after warm-up)
//   RUN/policy.safetensors       the policy at the end (reward_model.safetensors
//                                for a reward-model job)
//   RUN/workers.tsv              a launched run's workers
//   RUN/http.addr                the dashboard's address
//   RUN/compare.md, compare.json `trellis compare`
//   RUN/probe.json               `trellis probe`; RUN/<key>=<value>/ per probed run
//   RUN/progress.log             a probed run's progress lines
//   RUN/report.html              `trellis report`
//   RUN/launch/                  `trellis launch`: job.yaml, scheduler.addr, processes.tsv,
//                                restarts.tsv, secret (the job's secret, mode 0600)
//   RUN/checkpoints/step_<N>/    a checkpoint after N steps (CheckpointDir)
//   RUN/checkpoints/.tmp_step_<N>/  one being written
//   RUN/checkpoints/latest       "step_<N>\n": the newest complete checkpoint

#include <cstdint>
#include <string>
#include <utility>

namespace trellis::env {

// The files of one checkpoint directory (run/checkpoint.h).
class CheckpointDir {
 public:
  static constexpr char kWeights[] = "weights.safetensors";
  // A learner group with flat shards (memory.zero_stage 2, 3) writes the
  // policy as shards.rank<R>.safetensors with this index in place of
  // kWeights (learner/internal/sharded_checkpoint.h).
  static constexpr char kShardsIndex[] = "shards.index.json";
  static constexpr char kOptimizer[] = "optimizer.safetensors";
  static constexpr char kCritic[] = "critic.safetensors";
  static constexpr char kRng[] = "rng.safetensors";
  static constexpr char kState[] = "state.json";

  explicit CheckpointDir(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  // `name` inside this directory.
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  std::string Weights() const { return File(kWeights); }
  std::string Critic() const { return File(kCritic); }
  std::string Rng() const { return File(kRng); }
  std::string State() const { return File(kState); }
  // optimizer.safetensors of data-parallel rank 0, optimizer.rank<R>.safetensors
  // of the others.
  std::string Optimizer(int rank) const;

 private:
  std::string path_;
};

class RunDir {
 public:
  static constexpr char kJobYaml[] = "job.yaml";
  static constexpr char kLedger[] = "ledger.jsonl";
  static constexpr char kSummary[] = "summary.json";
  static constexpr char kReference[] = "reference.safetensors";
  static constexpr char kPolicy[] = "policy.safetensors";
  static constexpr char kRewardModel[] = "reward_model.safetensors";
  // The policy as a Hugging Face directory (jobs with model.path), and
  // under LoRA its adapters for PEFT.
  static constexpr char kHfPolicy[] = "hf";
  static constexpr char kHfAdapter[] = "hf_adapter";
  static constexpr char kCheckpoints[] = "checkpoints";
  // TensorBoard's log directory: events.out.tfevents.<time>.<host> files.
  static constexpr char kTensorBoard[] = "tensorboard";
  // The evaluations' answers: <label>.jsonl (loop/eval_answers.h).
  static constexpr char kEval[] = "eval";

  explicit RunDir(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  // `name` inside the run directory.
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  std::string JobYaml() const { return File(kJobYaml); }
  std::string Ledger() const { return File(kLedger); }
  std::string Summary() const { return File(kSummary); }
  std::string Reference() const { return File(kReference); }
  std::string Policy() const { return File(kPolicy); }
  std::string RewardModel() const { return File(kRewardModel); }
  std::string Workers() const { return File("workers.tsv"); }
  std::string HttpAddress() const { return File("http.addr"); }
  std::string CompareMarkdown() const { return File("compare.md"); }
  std::string CompareJson() const { return File("compare.json"); }
  std::string Probe() const { return File("probe.json"); }
  std::string ProgressLog() const { return File("progress.log"); }
  std::string Report() const { return File("report.html"); }
  // The answers of evaluation `label` ("before", "step_<N>", "after").
  std::string EvalAnswers(const std::string& label) const {
    return File(kEval) + "/" + label + ".jsonl";
  }
  // The one writer's lock (env/run_dir_lock.h).
  std::string Lock() const { return File("lock"); }

  // `trellis launch`'s directory and its files.
  std::string Launch() const { return File("launch"); }
  std::string LaunchJobYaml() const { return Launch() + "/" + kJobYaml; }
  std::string LaunchSchedulerAddress() const { return Launch() + "/scheduler.addr"; }
  std::string LaunchProcesses() const { return Launch() + "/processes.tsv"; }
  // The job's secret (rpc/auth.h), readable by its owner alone.
  std::string LaunchSecret() const { return Launch() + "/secret"; }
  std::string LaunchRestarts() const { return Launch() + "/restarts.tsv"; }

  // Checkpoints.
  std::string Checkpoints() const { return File(kCheckpoints); }
  std::string LatestCheckpoint() const { return Checkpoints() + "/latest"; }
  // "step_<N>", what `latest` holds.
  static std::string CheckpointName(int64_t step);
  CheckpointDir Checkpoint(int64_t step) const;
  // Where Checkpoint(step) is written before it is renamed into place.
  CheckpointDir CheckpointInProgress(int64_t step) const;

 private:
  std::string path_;
};

}  // namespace trellis::env

#endif  // TRELLIS_ENV_RUN_DIR_H_
