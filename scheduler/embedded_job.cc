#include "scheduler/embedded_job.h"

#include <ATen/Parallel.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "actor/local_actor.h"
#include "config/job_config.h"
#include "data/dataset.h"
#include "learner/local_learner.h"
#include "ledger/ledger.h"
#include "ledger/memory_tracker.h"
#include "model/tokenizer.h"
#include "reference/reference_worker.h"
#include "scheduler/checkpoint.h"
#include "scheduler/grpo_loop.h"
#include "verifier/verifier.h"
#include "weightsync/transport.h"

namespace trellis::scheduler {
namespace {

absl::StatusOr<data::Split> LoadData(const v1::JobConfig& job) {
  const v1::DataConfig& d = job.data();
  if (d.train_path().empty()) {
    return data::GenerateArithmetic(d.arithmetic(), job.runtime().seed());
  }
  data::Split split;
  absl::StatusOr<std::vector<data::Example>> train = data::ReadJsonl(d.train_path());
  if (!train.ok()) return train.status();
  split.train = *std::move(train);
  if (d.eval_path().empty()) {
    return absl::InvalidArgumentError(
        "data.eval_path: required when data.train_path is set");
  }
  absl::StatusOr<std::vector<data::Example>> eval = data::ReadJsonl(d.eval_path());
  if (!eval.ok()) return eval.status();
  split.eval = *std::move(eval);
  return split;
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

void PrintTable(const ledger::Ledger& ledger, const GrpoLoop& loop, std::ostream& out) {
  out << "\n== summary ==\n";
  out << absl::StrFormat("held-out accuracy (greedy): before %.3f  after %.3f  (%+.1f points)\n",
                         loop.eval_before().accuracy, loop.eval_after().accuracy,
                         100 * (loop.eval_after().accuracy - loop.eval_before().accuracy));
  out << absl::StrFormat("%-12s %10s\n", "stage", "seconds");
  for (int s = 0; s < ledger::kNumStages; ++s) {
    const auto stage = static_cast<ledger::Stage>(s);
    out << absl::StrFormat("%-12s %10.2f\n", ledger::StageName(stage),
                           ledger.stage_seconds(stage));
  }
  out << absl::StrFormat("%-18s %12s\n", "memory object", "peak bytes");
  for (int o = 0; o < ledger::kNumObjects; ++o) {
    const auto object = static_cast<ledger::Object>(o);
    out << absl::StrFormat("%-18s %12d\n", ledger::ObjectName(object),
                           ledger.object_peak_bytes(object));
  }
  out << absl::StrFormat("%-18s %12d\n", "peak (tracked)", ledger.peak_bytes());
}

}  // namespace

// Runs `job_in` into `out_dir`; continues from `resume` when it is set.
static absl::Status RunJob(const v1::JobConfig& job_in, const std::string& out_dir,
                    const Checkpoint* resume, std::ostream& progress) {
  v1::JobConfig job = job_in;
  if (absl::Status s = config::ValidateJob(job); !s.ok()) return s;
  const int threads = job.runtime().num_threads() > 0
                          ? job.runtime().num_threads()
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  ledger::MemoryTracker::Install();

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  job.mutable_runtime()->set_out_dir(out_dir);
  ledger::Ledger ledger;
  if (resume == nullptr) {
    if (absl::Status s = WriteFile(out_dir + "/job.yaml", config::ResolvedJobYaml(job));
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ledger.Open(out_dir + "/ledger.jsonl"); !s.ok()) return s;
  } else {
    const LoopState& state = resume->state;
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
    if (absl::Status s = ledger.OpenForResume(out_dir + "/ledger.jsonl", state.next_step - 1,
                                              &dropped);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ledger.ImportState(state.ledger_state); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(resume->dir, "/state.json: ", s.message()));
    }
    // Set-up work of the resumed process counts toward the step it resumes at.
    ledger.BeginStep(state.next_step);
    progress << "resuming from " << resume->dir << " (" << state.next_step << " of "
             << job.grpo().steps() << " steps done; dropped " << dropped
             << " ledger records past it)" << std::endl;
  }

  std::unique_ptr<model::Tokenizer> tokenizer = model::NewCharTokenizer();
  absl::StatusOr<data::Split> split;
  {
    auto span = ledger.Begin(ledger::Stage::kLoad, "scheduler");
    split = LoadData(job);
  }
  if (!split.ok()) return split.status();

  verifier::VerifierRegistry registry;
  if (absl::Status s = verifier::RegisterBuiltinVerifiers(registry); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<verifier::Verifier>> verifier = registry.Create(job.verifier());
  if (!verifier.ok()) return verifier.status();
  std::unique_ptr<verifier::VerifierClient> verifier_client =
      verifier::NewLocalVerifierClient(*std::move(verifier));

  std::unique_ptr<weightsync::Transport> transport = weightsync::NewInProcessTransport();
  learner::LocalLearnerOptions learner_options;
  learner_options.vocab_size = job.model().vocab_size() > 0 ? job.model().vocab_size()
                                                            : tokenizer->vocab_size();
  learner_options.pad_id = tokenizer->pad_id();
  learner_options.seed = job.runtime().seed();
  absl::StatusOr<std::unique_ptr<learner::LearnerWorker>> learner =
      learner::NewLocalLearner(job, learner_options, transport.get(), &ledger);
  if (!learner.ok()) return learner.status();
  std::unique_ptr<actor::RolloutWorker> actor =
      actor::NewLocalActor(job.model(), tokenizer.get(), transport.get(), &ledger);
  std::unique_ptr<reference::ReferenceWorker> reference;
  if (job.grpo().kl_coef() > 0) {
    reference = reference::NewLocalReference(job.model(), tokenizer.get(),
                                             job.sampling().temperature(), &ledger);
  }

  Roles roles;
  roles.actor = actor.get();
  roles.learner = learner->get();
  roles.reference = reference.get();
  roles.verifier = verifier_client.get();
  GrpoLoop loop(job, roles, tokenizer.get(), *std::move(split), &ledger, out_dir, &progress);
  if (resume != nullptr) {
    if (absl::Status s = (*learner)->RestoreCheckpoint(resume->dir); !s.ok()) return s;
    if ((*learner)->policy_version() != resume->state.policy_version) {
      return absl::DataLossError(absl::StrCat(
          resume->dir, ": state.json has policy_version ", resume->state.policy_version,
          " but the learner's files have ", (*learner)->policy_version()));
    }
    // Last: building the roles drew from the global generator.
    if (absl::Status s = RestoreGlobalRng(resume->dir); !s.ok()) return s;
    loop.ResumeFrom(resume->state);
  }
  if (absl::Status s = loop.Run(); !s.ok()) return s;

  {
    auto span = ledger.Begin(ledger::Stage::kCheckpoint, "learner-0");
    if (absl::Status s = (*learner)->SaveWeights(out_dir + "/policy.safetensors"); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = ledger.WriteSummary(out_dir + "/summary.json"); !s.ok()) return s;
  PrintTable(ledger, loop, progress);
  progress << "wrote " << out_dir << "/{summary.json,ledger.jsonl,job.yaml,policy.safetensors}\n";
  return absl::OkStatus();
}

absl::Status RunEmbeddedJob(const v1::JobConfig& job, const std::string& out_dir,
                            std::ostream& progress) {
  return RunJob(job, out_dir, nullptr, progress);
}

absl::Status ResumeEmbeddedJob(const std::string& run_dir, std::ostream& progress) {
  absl::StatusOr<v1::JobConfig> job = config::LoadJobFile(run_dir + "/job.yaml");
  if (!job.ok()) {
    return absl::Status(job.status().code(),
                        absl::StrCat("resume: ", job.status().message()));
  }
  absl::StatusOr<Checkpoint> checkpoint = ReadLatestCheckpoint(run_dir);
  if (!checkpoint.ok()) return checkpoint.status();
  return RunJob(*job, run_dir, &*checkpoint, progress);
}

}  // namespace trellis::scheduler
