#ifndef TRELLIS_LEDGER_LEDGER_H_
#define TRELLIS_LEDGER_LEDGER_H_

// The resource ledger: where every second and byte of a step went.
//
// Roles open spans around their stages and report resident objects; the
// scheduler reports each step's counts. The ledger derives the step metrics
// (stage seconds, rollout/update ratio, verifier wait, handoff cost,
// effective-sample rate and its losses, tokens/s), appends every record to
// OUT/ledger.jsonl (schema: ledger/README.md), and writes OUT/summary.json.
//
// Thread-safe.

#include <array>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "env/env.h"
#include "ledger/attribution.h"
#include "ledger/kinds.h"
#include "ledger/memory_source.h"
#include "ledger/process_memory.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::ledger {

// What the scheduler counted in one step; the ledger derives the rest.
// Exact accounting of a run's RL prompt stream, over the run so far: every
// prompt drawn is trained, dropped with a reason, or still in flight (drawn
// by the asynchronous pipeline for a step not trained yet).
struct PromptAccount {
  int64_t drawn = 0;
  // In a step's batch (at least one of its samples trained).
  int64_t trained = 0;
  // Left out of every batch, by reason: "dynamic_sampling" (DAPO left its
  // group out), "no_sample_kept" (the drop policy, overlong filtering or
  // empty responses left none of its samples), "no_pair" (online_dpo: its
  // rewards were all equal).
  std::map<std::string, int64_t> dropped;
  int64_t in_flight = 0;

  int64_t dropped_total() const;
  // drawn == trained + dropped_total() + in_flight.
  bool Reconciles() const;
};

struct StepCounts {
  int64_t step = 0;
  int64_t policy_version = 0;
  int64_t prompts = 0;
  int64_t responses_per_prompt = 0;
  int64_t samples_generated = 0;
  // Samples whose advantage is non-zero: they carry gradient.
  int64_t samples_effective = 0;
  // Losses, each counted once (a sample in a zero-variance group is counted
  // there even if it was also truncated).
  int64_t samples_zero_variance = 0;
  int64_t samples_truncated = 0;
  int64_t samples_unparseable = 0;
  int64_t samples_error = 0;
  // TIMEOUT verdicts that trained with verifier.timeout_reward, and samples
  // left out by verifier.timeout_policy "drop" (with their groups when too
  // few samples were left).
  int64_t samples_timeout = 0;
  int64_t samples_dropped = 0;
  // Finite rewards beyond verifier.max_abs_reward, clipped to it (a
  // non-finite reward is an ERROR verdict, in samples_error).
  int64_t samples_reward_clipped = 0;
  int64_t generated_tokens = 0;
  int64_t trained_tokens = 0;
  double mean_reward = 0;
  // Fraction of samples the verifier judged correct.
  double accuracy = 0;
  double loss = 0;
  double kl = 0;
  double clip_fraction = 0;
  double grad_norm = 0;
  // Updates that took no optimizer step because their loss or gradient
  // norm was not finite (TrainStats.skipped_nonfinite; the run stops after
  // runtime.max_nonfinite_skips in a row).
  int64_t steps_skipped_nonfinite = 0;
  // PPO: the critic's value loss and the fraction of its values clipped.
  double value_loss = 0;
  double value_clip_fraction = 0;
  // DAPO dynamic sampling (grpo.dapo.dynamic_sampling): rollout rounds
  // after the first, the prompts they drew (also in `prompts`), and their
  // seconds (rollout, verify); samples of groups with different rewards
  // beyond prompts_per_step, left out.
  int64_t sampling_rounds_extra = 0;
  int64_t prompts_extra = 0;
  double sampling_seconds_extra = 0;
  int64_t samples_surplus = 0;
  // DAPO overlong filtering (grpo.dapo.overlong_filtering): truncated
  // samples left out of the loss (each also counted above as truncated or
  // zero-variance).
  int64_t samples_overlong = 0;
  // Seconds of verification that ran while the rollout was still going
  // (streamed parts: scheduler/streaming_verify.h).
  double verify_overlap_seconds = 0;
  // Preference steps (dpo, online_dpo): the batch's mean implicit reward
  // margin and the fraction of its pairs ranked right (TrainStats).
  double reward_margin = 0;
  double preference_accuracy = 0;
  // Memory strategies (job.memory), from the learner's TrainStats: seconds
  // recomputing checkpointed blocks; ZeRO-1's gradient and parameter
  // traffic of the learner ranks, bytes and seconds.
  double recompute_seconds = 0;
  int64_t communication_bytes = 0;
  double communication_seconds = 0;
  // The asynchronous pipeline (job.async): staleness[k] samples trained k
  // policy versions after the version that generated them (the synchronous
  // loop: all at 0); decoupled PPO's mean |behaviour - proximal| log-prob
  // per token and fraction of importance weights truncated (TrainStats).
  std::vector<int64_t> staleness;
  double logprob_gap = 0;
  double importance_weight_truncated = 0;
  // Mixture-of-experts policies (TrainStats): the load-balancing loss;
  // with grpo.routing_replay the share of positions the learner's own
  // router would have sent to other experts in some layer, the routing records'
  // bytes, and the mean |behaviour - learner| log-prob per trained token
  // with the replayed and with the learner's own routing.
  double router_aux_loss = 0;
  double routing_mismatch = 0;
  int64_t routing_record_bytes = 0;
  double logprob_gap_replayed = 0;
  double logprob_gap_own_routing = 0;
  // Distill: the mean over trained tokens of the divergence estimate to
  // the teacher before the update (TrainStats.teacher_divergence).
  double teacher_divergence = 0;
  // The ids of the prompts the step trained (PromptAccount::trained), in
  // order, and the RL prompt stream's account at the step's end.
  std::vector<uint64_t> prompt_ids;
  PromptAccount prompt_account;
};

// The derived metrics of one step, as written to ledger.jsonl.
struct StepMetrics {
  StepCounts counts;
  std::array<double, kNumStages> stage_seconds{};
  double step_seconds = 0;
  double rollout_update_ratio = 0;
  double verifier_wait_seconds = 0;
  double effective_sample_rate = 0;
  double generated_tokens_per_second = 0;
  double trained_tokens_per_second = 0;
  double handoff_seconds = 0;
  int64_t handoff_bytes = 0;
  // Moves between device and host in this step (RecordMove): their count,
  // bytes and seconds, both directions summed.
  int64_t moves = 0;
  int64_t move_bytes = 0;
  double move_seconds = 0;
  // Highest live CPU bytes during the step (memory tracker).
  int64_t peak_bytes = 0;
  // The step's timeline: each role's busy seconds (the union of its spans
  // within the step), and the share of the roles' time none of their spans
  // covered (1 - sum busy / (roles x step_seconds)).
  std::map<std::string, double> role_busy_seconds;
  double bubble_fraction = 0;
  // Useful arithmetic per stage this step (RecordFlops), and the run's
  // measured matrix-product peak (RecordMachine; 0 before it).
  std::array<double, kNumStages> stage_flops{};
  double matmul_peak_flops_per_second = 0;
};

// What a run measured of its machine once, at its start.
struct MachineRecord {
  // FLOP/s of a float32 matrix product with the process's threads
  // (model/matmul_rate.h MeasureMatmulPeak).
  double matmul_peak_flops_per_second = 0;
  // The process's pools (model/threads.h): LibTorch's intra-op and
  // inter-op threads, OpenBLAS's (0: not OpenBLAS).
  int intra_op_threads = 0;
  int inter_op_threads = 0;
  int blas_threads = 0;
  // The count the job gave (runtime.num_threads resolved), and the thread
  // probe's seconds per intra-op count it tried (model/thread_probe.h;
  // empty when the job gave 1 thread).
  int threads_given = 0;
  std::map<int, double> thread_probe_seconds;
};

struct EvalMetrics {
  // Held-out prompts (sft: examples; dpo: pairs).
  int64_t prompts = 0;
  // Fraction correct: greedy answers the verifier accepts (grpo,
  // online_dpo); teacher-forced exact match (sft); pairs whose chosen
  // response has the higher implicit reward, ties counting half (dpo).
  double accuracy = 0;
  double mean_reward = 0;
  // Recipe metrics, written only when set: the held-out loss (sft: token
  // mean over answer tokens; dpo: the DPO / IPO loss) and the mean implicit
  // reward margin (dpo).
  std::optional<double> loss;
  std::optional<double> reward_margin;
  // Rollout evaluations (set there only): held-out items whose every
  // verification failed (ERROR or TIMEOUT, eval.verify_retries + 1 times);
  // the evaluation is complete when there are none. An incomplete one has
  // no accuracy or mean_reward (0 here, null in ledger.jsonl and
  // summary.json): the items scored are not the held-out set.
  // verify_retries counts the items verified again after a failure.
  std::optional<int64_t> unscored;
  int64_t verify_retries = 0;
};

// The records a worker's ledger forwards to the scheduler's
// (Ledger::ForwardRecords): RecordObject's and RecordMove's arguments.
struct ForwardedObject {
  Object object = Object::kParameters;
  int64_t bytes = 0;
  Stage stage = Stage::kLoad;
};
struct ForwardedMove {
  Object object = Object::kParameters;
  MoveDirection direction = MoveDirection::kOut;
  int64_t bytes = 0;
  double seconds = 0;
  Stage stage = Stage::kLoad;
};
using ForwardedRecord = std::variant<ForwardedObject, ForwardedMove>;

class Ledger {
 public:
  // Times spans with env->MonotonicSeconds() and writes its files through
  // `env` (tests inject env::testing::FakeEnv). REQUIRES: `env` outlives
  // the ledger.
  explicit Ledger(env::Env* env = env::Env::Default());
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Writes records to `path` (truncated first), each line whole or not at
  // all. Without Open the ledger still aggregates; nothing is written.
  [[nodiscard]] absl::Status Open(const std::string& path);

  // The first failed write to ledger.jsonl (the disk is full, ...), naming
  // the file; OK while every record was written. After a failure the
  // ledger writes no more records (the file ends with the last whole one)
  // and a run must stop: check after each step.
  [[nodiscard]] absl::Status status() const;

  // The Env the ledger times and writes with: the run's Env, which the
  // loop's checkpoints use too.
  env::Env* env() const;

  // Resumes a run's ledger at `path`: keeps the records whose "step" is at
  // most `last_step` (set-up records have step -1), drops the later ones (a
  // killed run's steps past its checkpoint, which the resumed run redoes) and
  // a torn last line, rewrites the file atomically, then appends to it.
  // Fails with DataLoss, naming the line, when a record before the last line
  // is not JSON or has no integer "step". Stores the number of records
  // dropped in *dropped (may be null).
  [[nodiscard]] absl::Status OpenForResume(const std::string& path, int64_t last_step,
                                           int64_t* dropped = nullptr);

  // The run totals behind summary.json (steps, stage seconds, counts,
  // handoffs, evals, memory peaks and objects, wall seconds so far) as JSON
  // text, for a checkpoint; ImportState puts them back in a fresh ledger so
  // that the resumed run's summary covers the whole run. ImportState fails
  // with DataLoss, naming the field, on malformed text.
  std::string ExportState() const;
  [[nodiscard]] absl::Status ImportState(const std::string& state);

  // The step that following spans belong to; -1 (the default) is set-up.
  void BeginStep(int64_t step);
  int64_t current_step() const;

  // Times one stage of one role, and the memory peak inside it (when the
  // MemoryTracker is installed). Its seconds count toward the step open when
  // it ends. One thread uses a span at a time; the ledger must outlive it.
  class Span {
   public:
    Span(Span&& other) noexcept;
    ~Span();
    // Ends the span now (idempotent); returns its seconds.
    double End();

   private:
    friend class Ledger;
    Span(Ledger* ledger, Stage stage, std::string role);
    struct State;
    State* state_;
  };
  Span Begin(Stage stage, std::string_view role);

  // Device memory (docs/gpu.md, "The ledger on CUDA"): from now on every
  // span and step also measures `source` (a CUDA device's caching
  // allocator, ledger/cuda_memory.h): its peak allocated and reserved bytes
  // and their difference, the fragmentation (the records'
  // "device_memory"); and each role's highest span peak on it is
  // attributed, by the CPU's rule, to the objects of `roles` (the roles
  // computing on the device; empty: every role). The ledger owns the
  // source's peak stats (ledger/internal/source_windows.h: nested and
  // overlapping spans each get their own peak). Call before the spans it
  // should measure; one source per device.
  void AddDeviceMemory(std::unique_ptr<MemorySource> source, std::vector<std::string> roles);

  // The size of a resident object as seen during `stage`. The ledger keeps
  // each object's peak and whether it was live when the run's peak happened.
  void RecordObject(std::string_view role, Object object, int64_t bytes,
                    Stage stage);
  // An object another process holds (a launched worker's, forwarded to the
  // scheduler's ledger; `role` is the worker): recorded and summarized as
  // RecordObject's, but never attributed to a peak this process measured,
  // nor counted in its process memory.
  void RecordRemoteObject(std::string_view role, Object object, int64_t bytes, Stage stage);
  // This process's memory named part by part, from a sample taken now and
  // every earlier one: what summary.json memory.process shows.
  ProcessMemoryAccount ProcessAccount();
  // Another process's memory (a launched worker's, forwarded to the
  // scheduler's ledger; `role` is the worker): the latest account replaces
  // the earlier. summary.json memory.worker_processes.
  void RecordRemoteProcess(std::string_view role, const ProcessMemoryAccount& account);
  void RecordHandoff(std::string_view role, const v1::WeightSyncStats& stats);
  // One move of `role`'s `object` between its compute device and host
  // memory (CPU offload, the colocated placement: docs/gpu.md), inside
  // `stage`: a "move" record with the bytes the role then holds offloaded
  // in host memory (its host side: out adds the bytes, in takes them back);
  // the bytes and seconds add to the open step and the run's totals
  // (summary.json "moves"). The object's device bytes are the role's own
  // RecordObject reports (0 while it is out).
  void RecordMove(std::string_view role, Object object, MoveDirection direction, int64_t bytes,
                  double seconds, Stage stage);
  // In a worker process: every RecordObject and RecordMove is also handed
  // to `forward` (outside the ledger's lock), which sends it to the
  // scheduler's ledger. Null detaches.
  using RecordForward = std::function<void(std::string_view role, const ForwardedRecord& record)>;
  void ForwardRecords(RecordForward forward);
  // Every record, as the line ledger.jsonl gets (without the newline), is
  // also handed to each observer, whether or not a file is open: the live
  // metrics and dashboard (ledger/run_view.h) and the run's metric sinks
  // (observe/, docs/observe.md) read the ledger this way. Called under the
  // ledger's lock, in record order, observers in the order they were
  // added: an observer must not call the ledger, and must return soon.
  // AddRecordObserver returns the id RemoveRecordObserver takes (an id
  // already removed is ignored).
  using RecordObserver = std::function<void(std::string_view record)>;
  using ObserverId = int64_t;
  ObserverId AddRecordObserver(RecordObserver observe);
  void RemoveRecordObserver(ObserverId id);
  // Closes the current step: derives its metrics from the spans, handoffs
  // and counts, writes a "step" record, and returns the metrics.
  // step_seconds is wall time since BeginStep (or the previous EndStep).
  StepMetrics EndStep(const StepCounts& counts);
  void RecordEval(std::string_view label, const EvalMetrics& metrics);
  // `flops` floating-point operations of useful work a stage did (matrix
  // products on live, non-pad tokens: config/flops.h), added to `stage` in
  // the open step and the run totals; the step record and the summary give
  // each stage's FLOP, its rate (FLOP over the stage's seconds) and that
  // rate's share of the machine's peak. Roles call it inside the stage's
  // span: the learner for its updates, the reference for its scoring; the
  // driver for the actors' rollouts and evaluations, from
  // GenerateResponse.forward_flops.
  void RecordFlops(Stage stage, double flops);
  // The run's machine: a "machine" record; its peak divides every later
  // stage rate.
  void RecordMachine(const MachineRecord& machine);
  // One verifier's stats for one request (filled by the verifier pool, with
  // `dropped` by the scheduler): writes a "verifier" record and adds to the
  // run's per-verifier totals (summary.json "verifiers").
  void RecordVerifier(const v1::VerifierStats& stats);
  // A multi-turn step's environment stats (loop/episode_runner.h) over a
  // rollout of `rollout_seconds`: writes an "environment" record and adds
  // stats.wait_seconds to the environment stage of the open step.
  void RecordEnvironment(const v1::EnvironmentStats& stats, double rollout_seconds);

  double stage_seconds(Stage stage) const;
  double stage_flops(Stage stage) const;
  double matmul_peak_flops_per_second() const;
  int64_t object_peak_bytes(Object object) const;
  int64_t peak_bytes() const;
  // The highest span peak of each role that ran a span, reconciled against
  // the objects live during that span (attribution.h); sorted by role.
  // Empty without the memory tracker.
  std::vector<PeakAttribution> RolePeaks() const;
  // Each role's highest span peak on each device added (AddDeviceMemory),
  // attributed to the objects of the device's roles; sorted by device, then
  // role. Empty without devices.
  std::vector<PeakAttribution> DeviceRolePeaks() const;

  // summary.json: eval.<label>.*, verifiers.<name>.*, steps, stage_seconds.*, rollout_update_ratio,
  // verifier_wait_seconds, effective_sample_rate and its losses,
  // handoff.*, moves.*, tokens/s, memory.peak_bytes, memory.peak_stage,
  // memory.objects.* (peak bytes of each object). Written atomically
  // (path.tmp, then rename). Also returns an earlier ledger.jsonl write
  // error, after writing the summary.
  [[nodiscard]] absl::Status WriteSummary(const std::string& path) const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_LEDGER_H_
