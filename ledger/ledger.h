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
#include "ledger/step_records.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::ledger {

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
