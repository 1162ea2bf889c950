#include "run/job_runner.h"

#include <iostream>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/job_config.h"
#include "config/recipe.h"
#include "config/worker_id.h"
#include "data/dataset.h"
#include "env/run_dir.h"
#include "ledger/memory_tracker.h"
#include "loop/driver.h"
#include "model/matmul_rate.h"
#include "model/threads.h"
#include "observe/run_metrics.h"
#include "roles/local_roles.h"
#include "run/hf_output.h"
#include "run/run_dir_claim.h"

namespace trellis::run {

absl::StatusOr<data::Split> LoadJobData(const v1::JobConfig& job) {
  const v1::DataConfig& d = job.data();
  if (d.train_path().empty()) {
    return data::GenerateArithmetic(d.arithmetic(), job.runtime().seed());
  }
  data::Split split;
  // SFT jobs' lines may name the target "response", their chats leave it out.
  const bool sft = config::RecipeOf(job) == config::Recipe::kSft;
  for (auto [path, out] :
       {std::pair{&d.train_path(), &split.train}, std::pair{&d.eval_path(), &split.eval}}) {
    absl::StatusOr<std::vector<data::Example>> examples =
        data::ReadExamples(*path, d.columns(), sft);
    if (!examples.ok()) return examples.status();
    *out = *std::move(examples);
  }
  return split;
}

namespace {


// `headline`: the recipe's target metric before and after.
void PrintTable(const ledger::Ledger& ledger, const std::string& headline, std::ostream& out) {
  out << "\n== summary ==\n" << headline;
  // Each stage's useful arithmetic, its rate, and that rate's share of the
  // machine's measured matrix-product peak (blank where none was recorded).
  const double peak = ledger.matmul_peak_flops_per_second();
  out << absl::StrFormat("%-16s %10s %10s %9s %7s   (matmul peak %.1f GFLOP/s)\n", "stage",
                         "seconds", "GFLOP", "GFLOP/s", "% peak", peak / 1e9);
  for (int s = 0; s < ledger::kNumStages; ++s) {
    const auto stage = static_cast<ledger::Stage>(s);
    const double seconds = ledger.stage_seconds(stage), flops = ledger.stage_flops(stage);
    out << absl::StrFormat("%-16s %10.2f", ledger::StageName(stage), seconds);
    if (flops > 0 && seconds > 0) {
      const double rate = flops / seconds;
      out << absl::StrFormat(" %10.2f %9.2f %6.1f%%", flops / 1e9, rate / 1e9,
                             peak > 0 ? 100 * rate / peak : 0.0);
    }
    out << "\n";
  }
  out << absl::StrFormat("%-18s %12s\n", "memory object", "peak bytes");
  for (int o = 0; o < ledger::kNumObjects; ++o) {
    const auto object = static_cast<ledger::Object>(o);
    out << absl::StrFormat("%-18s %12d\n", ledger::ObjectName(object),
                           ledger.object_peak_bytes(object));
  }
  out << absl::StrFormat("%-18s %12d\n", "peak (tracked)", ledger.peak_bytes());
  out << "\n== memory at each role's peak (allocated = reserved on CPU) ==\n";
  ledger::PrintAttribution(ledger.RolePeaks(), out);
  if (const std::vector<ledger::PeakAttribution> device = ledger.DeviceRolePeaks();
      !device.empty()) {
    out << "\n== device memory at each role's peak (the CUDA allocator's allocated bytes) ==\n";
    ledger::PrintAttribution(device, out);
  }
}

}  // namespace

absl::Status RunJob(const v1::JobConfig& job_in, const std::string& out_dir,
                    const Checkpoint* resume, const RoleBinder& bind, std::ostream& progress,
                    std::function<void(ledger::Ledger*)> observe,
                    std::function<bool()> stop_requested, env::Env* env) {
  v1::JobConfig job = job_in;
  if (absl::Status s = loop::PrepareJob(&job); !s.ok()) return s;
  const model::ThreadCounts threads = roles::SetThreads(job);
  ledger::MemoryTracker::Install();

  const env::RunDir run(out_dir);
  ApplyRunDirAccess(job);
  if (absl::Status s = env->CreateDir(out_dir); !s.ok()) return s;
  job.mutable_runtime()->set_out_dir(out_dir);
  ledger::Ledger ledger(env);
  if (resume == nullptr) {
    if (absl::Status s = env->WriteFileAtomically(run.JobYaml(), config::ResolvedJobYaml(job));
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ledger.Open(run.Ledger()); !s.ok()) return s;
  } else {
    const loop::LoopState& state = resume->state;
    if (state.seed != job.runtime().seed()) {
      return absl::FailedPreconditionError(absl::StrCat(
          resume->dir, ": checkpoint of a run with seed ", state.seed,
          ", but the job has runtime.seed ", job.runtime().seed()));
    }
    if (state.next_step > job.grpo().steps()) {
      return absl::FailedPreconditionError(
          absl::StrCat(resume->dir, ": checkpoint after ", state.next_step,
                       " steps, but the job has grpo.steps ", job.grpo().steps()));
    }
    int64_t dropped = 0;
    if (absl::Status s = ledger.OpenForResume(run.Ledger(), state.next_step - 1, &dropped);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ledger.ImportState(state.ledger_state); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(env::CheckpointDir(resume->dir).State(), ": ",
                                                 s.message()));
    }
    // Set-up work of the resumed process counts toward the step it resumes at.
    ledger.BeginStep(state.next_step);
    progress << "resuming from " << resume->dir << " (" << state.next_step << " of "
             << job.grpo().steps() << " steps done; dropped " << dropped
             << " ledger records past it)" << std::endl;
  }

  // TensorBoard files, an MLflow run: fed from the ledger (docs/observe.md).
  absl::StatusOr<std::unique_ptr<observe::RunMetrics>> metrics = observe::RunMetrics::Start(
      job, out_dir, resume == nullptr ? -1 : resume->state.next_step, &ledger, env, &std::cerr);
  if (!metrics.ok()) return metrics.status();
  if (observe) observe(&ledger);
  ledger.RecordMachine({model::MeasureMatmulPeak(), threads.intra_op, threads.inter_op,
                        threads.blas, threads.given, threads.probe_seconds});
  // Detach before the summary (or, on an error, before the ledger goes): a
  // launched run's scheduler then waits for the workers' last forwarded
  // records (SchedulerService::AttachLedger), which the summary counts.
  absl::Cleanup detach = [&observe] {
    if (observe) observe(nullptr);
  };
  absl::StatusOr<std::unique_ptr<loop::PromptFormat>> format = loop::PromptFormat::ForJob(job);
  if (!format.ok()) return format.status();
  absl::StatusOr<data::Split> split;
  {
    auto span = ledger.Begin(ledger::Stage::kLoad, config::WorkerId(v1::SCHEDULER).ToString());
    split = LoadJobData(job);
  }
  if (!split.ok()) return split.status();

  absl::StatusOr<std::unique_ptr<RoleSet>> role_set = bind(job, &(*format)->tokenizer(), &ledger);
  if (!role_set.ok()) return role_set.status();
  const loop::Roles roles = (*role_set)->roles();
  // A failed ledger write stops the run before its next step, and is the
  // error the run ends with.
  auto stop = [&ledger, stop_requested = std::move(stop_requested)] {
    return !ledger.status().ok() || (stop_requested && stop_requested());
  };
  auto stopped = [&ledger](const absl::Status& s) {
    const absl::Status cause = ledger.status();
    if (cause.ok()) return s;
    return absl::Status(cause.code(),
                        absl::StrCat(cause.message(), "; the run stopped: ", s.message()));
  };
  loop::Driver driver(job, roles, format->get(), *std::move(split), &ledger, out_dir, &progress);
  driver.SetStopRequested(stop);
  driver.SetCheckpointWriter([&ledger, &out_dir, &roles](const loop::LoopState& state) {
    // Never a checkpoint whose ledger.jsonl lacks records of its steps.
    if (absl::Status s = ledger.status(); !s.ok()) return s;
    return WriteCheckpoint(ledger.env(), out_dir, state, [&roles](const std::string& dir) {
      return roles.learner->SaveCheckpoint(dir);
    });
  });
  if (resume != nullptr) {
    if (absl::Status s = (*role_set)->Restore(*resume); !s.ok()) return s;
    if (roles.learner->policy_version() != resume->state.policy_version) {
      return absl::DataLossError(absl::StrCat(
          resume->dir, ": state.json has policy_version ", resume->state.policy_version,
          " but the learner's files have ", roles.learner->policy_version()));
    }
    driver.ResumeFrom(resume->state);
  }
  if (absl::Status s = driver.Run(); !s.ok()) return stopped(s);
  const std::string headline = driver.Headline();

  // A reward-model job's model is a reward model, not a policy.
  const bool reward_model = config::RecipeOf(job) == config::Recipe::kRewardModel;
  const std::string weights = reward_model ? env::RunDir::kRewardModel : env::RunDir::kPolicy;
  {
    auto span = ledger.Begin(ledger::Stage::kCheckpoint, config::WorkerId(v1::LEARNER).ToString());
    if (absl::Status s = roles.learner->SaveWeights(run.File(weights)); !s.ok()) {
      return s;
    }
  }
  const bool export_hf = !job.model().path().empty() && !reward_model;
  if (export_hf) {
    // The export runs here, the scheduler's work in a launched run too.
    auto span =
        ledger.Begin(ledger::Stage::kCheckpoint, config::WorkerId(v1::SCHEDULER).ToString());
    if (absl::Status s = ExportHfPolicy(job, (*format)->tokenizer(), run, *roles.learner, ledger);
        !s.ok()) {
      return s;
    }
  }
  std::move(detach).Invoke();
  if (absl::Status s = ledger.WriteSummary(run.Summary()); !s.ok()) return s;
  (*metrics)->Finish(/*succeeded=*/true, run.Summary());
  PrintTable(ledger, headline, progress);
  progress << "wrote " << out_dir << "/{" << env::RunDir::kSummary << ","
           << env::RunDir::kLedger << "," << env::RunDir::kJobYaml << "," << weights
           << (export_hf ? absl::StrCat(",", env::RunDir::kHfPolicy, "/") : "") << "}\n";
  return absl::OkStatus();
}

}  // namespace trellis::run
