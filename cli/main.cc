// The `trellis` command.
//
//   trellis run [JOB.yaml] [--out DIR] [--seed N]
//       Runs a job with every role in this process. Without JOB.yaml it runs
//       the built-in default: GRPO on the arithmetic task, on CPU.
//   trellis verify --verifier NAME [--config KEY=VALUE ...] [--items] DATA.jsonl
//       Scores samples with one verifier, no training (verifier/verify_command.h).
//   trellis run --resume RUN_DIR
//       Continues the run in RUN_DIR from its newest checkpoint.

#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "config/job_config.h"
#include "scheduler/embedded_job.h"
#include "verifier/verify_command.h"

namespace {

constexpr char kUsage[] =
    "usage: trellis run [JOB.yaml] [--out DIR] [--seed N]\n"
    "       trellis verify --verifier NAME [--config KEY=VALUE ...] [--items] DATA.jsonl\n"
    "       trellis run --resume RUN_DIR\n"
    "  run   run a job with every role in this process; without JOB.yaml,\n"
    "        the built-in GRPO arithmetic job. Outputs go to --out (default:\n"
    "        the job's runtime.out_dir); --seed overrides runtime.seed.\n"
    "        --resume continues the run in RUN_DIR (its job.yaml) from its\n"
    "        newest checkpoint (runtime.checkpoint_every) and writes there.\n";

int Run(const std::vector<std::string>& args) {
  std::string job_path, out_dir, seed, resume;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--out" || args[i] == "--seed" || args[i] == "--resume") {
      if (i + 1 == args.size()) {
        std::cerr << "trellis run: " << args[i] << " needs a value\n" << kUsage;
        return 2;
      }
      (args[i] == "--out" ? out_dir : args[i] == "--seed" ? seed : resume) = args[i + 1];
      ++i;
    } else if (args[i].rfind("-", 0) == 0) {
      std::cerr << "trellis run: unknown flag " << args[i] << "\n" << kUsage;
      return 2;
    } else if (job_path.empty()) {
      job_path = args[i];
    } else {
      std::cerr << "trellis run: more than one job file (" << job_path << ", "
                << args[i] << ")\n" << kUsage;
      return 2;
    }
  }
  if (!resume.empty()) {
    if (!job_path.empty() || !out_dir.empty() || !seed.empty()) {
      std::cerr << "trellis run: --resume takes the job, output directory and seed from "
                   "RUN_DIR; drop the job file, --out and --seed\n"
                << kUsage;
      return 2;
    }
    std::cout << "trellis run: resuming " << resume << std::endl;
    absl::Status status = trellis::scheduler::ResumeEmbeddedJob(resume, std::cout);
    if (!status.ok()) {
      std::cerr << "trellis run: " << status << "\n";
      return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    return 0;
  }
  absl::StatusOr<trellis::v1::JobConfig> loaded =
      job_path.empty() ? trellis::scheduler::DefaultJob()
                       : trellis::config::LoadJobFile(job_path);
  if (!loaded.ok()) {
    std::cerr << "trellis run: " << loaded.status().message() << "\n";
    return 2;
  }
  trellis::v1::JobConfig job = *std::move(loaded);
  if (!seed.empty()) {
    uint64_t value = 0;
    if (!absl::SimpleAtoi(seed, &value)) {
      std::cerr << "trellis run: --seed: expected a non-negative integer, found \"" << seed
                << "\"\n";
      return 2;
    }
    job.mutable_runtime()->set_seed(value);
  }
  if (out_dir.empty()) out_dir = job.runtime().out_dir();
  std::cout << "trellis run: job " << job.name() << " -> " << out_dir << std::endl;
  absl::Status status = trellis::scheduler::RunEmbeddedJob(job, out_dir, std::cout);
  if (!status.ok()) {
    std::cerr << "trellis run: " << status << "\n";
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "run") return Run(args);
  if (command == "verify") return trellis::verifier::VerifyCommand(args, std::cout, std::cerr);
  std::cerr << "trellis: unknown command '" << command << "'\n" << kUsage;
  return 2;
}
