// The `trellis` command.
//
//   trellis run [JOB.yaml] [--out DIR] [--seed N]
//       Runs a job with every role in this process. Without JOB.yaml it runs
//       the built-in default: GRPO on the arithmetic task, on CPU.
//   trellis run --resume RUN_DIR
//       Continues the run in RUN_DIR from its newest checkpoint.
//   trellis launch [JOB.yaml] [--out DIR] [--seed N] [--cluster CLUSTER.yaml]
//   trellis launch --resume RUN_DIR [--cluster CLUSTER.yaml]
//       The same job with the scheduler and every role a process of its own.
//   trellis serve ROLE --scheduler ADDR [--listen HOST:PORT] [--index K]
//   trellis serve scheduler [--job JOB.yaml] [--out DIR] [--listen HOST:PORT]
//                           [--address-file FILE] [--resume RUN_DIR]
//       One service, as a launcher, Slurm or Kubernetes starts it.
//   trellis verify --verifier NAME [--config KEY=VALUE ...] [--items] DATA.jsonl
//       Scores samples with one verifier, no training (verifier/verify_command.h).
//   trellis plan | probe | compare ...
//       Memory and step-time plan, pressure probes, strategy comparison
//       (cli/measure_commands.h).

#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "cli/measure_commands.h"
#include "config/job_config.h"
#include "launch/launcher.h"
#include "launch/worker.h"
#include "scheduler/distributed_job.h"
#include "scheduler/embedded_job.h"
#include "verifier/verifier_service.h"
#include "verifier/verify_command.h"

namespace {

constexpr char kUsage[] =
    "usage: trellis run [JOB.yaml] [--out DIR] [--seed N]\n"
    "       trellis run --resume RUN_DIR\n"
    "       trellis launch [JOB.yaml] [--out DIR] [--seed N] [--cluster CLUSTER.yaml]\n"
    "       trellis launch --resume RUN_DIR [--cluster CLUSTER.yaml]\n"
    "       trellis serve ROLE --scheduler HOST:PORT [--listen HOST:PORT] [--index K]\n"
    "       trellis serve scheduler [--job JOB.yaml] [--out DIR] [--listen HOST:PORT]\n"
    "                               [--address-file FILE] [--resume RUN_DIR]\n"
    "       trellis verify --verifier NAME [--config KEY=VALUE ...] [--items] DATA.jsonl\n"
    "       trellis plan [JOB.yaml] [--json FILE]\n"
    "       trellis probe [JOB.yaml] --vary KEY=V1,V2,... [--steps N] [--role ROLE] [--out DIR]\n"
    "       trellis compare RUN_A RUN_B [...] [--tolerance X] [--budget X]\n"
    "  run     run a job with every role in this process; without JOB.yaml,\n"
    "          the built-in GRPO arithmetic job. Outputs go to --out (default:\n"
    "          the job's runtime.out_dir); --seed overrides runtime.seed.\n"
    "          --resume continues the run in RUN_DIR (its job.yaml) from its\n"
    "          newest checkpoint (runtime.checkpoint_every) and writes there.\n"
    "  launch  the same job with the scheduler and every role (deployment.*.count\n"
    "          of each) a separate process on this host, placed on the pools of\n"
    "          --cluster (default: this host as the pool \"local\"); --resume\n"
    "          continues a launched run from its newest checkpoint.\n"
    "  serve   one service: ROLE is actor, learner, reference or verifier; the\n"
    "          scheduler serves the job given, or the first one submitted.\n"
    "  verify  score samples with one verifier, no training.\n"
    "  plan    memory per role and object, and step time, estimated before running.\n"
    "  probe   short runs per setting of KEY (micro_batch, seq_len, accumulation,\n"
    "          optimizer or a job field's path); names the object whose peak moved.\n"
    "  compare baseline RUN_A against candidates side by side, with a verdict;\n"
    "          writes RUN_A/compare.md and compare.json.\n";

// Flags of the form --name VALUE; the rest are positional. Returns false
// (after saying why) on an unknown flag or a flag without its value.
bool ParseFlags(const std::string& command, const std::vector<std::string>& args,
                const std::set<std::string>& known, std::map<std::string, std::string>& flags,
                std::vector<std::string>& positional) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) != 0) {
      positional.push_back(args[i]);
      continue;
    }
    if (!known.count(args[i])) {
      std::cerr << "trellis " << command << ": unknown flag " << args[i] << "\n" << kUsage;
      return false;
    }
    if (i + 1 == args.size()) {
      std::cerr << "trellis " << command << ": " << args[i] << " needs a value\n" << kUsage;
      return false;
    }
    flags[args[i]] = args[i + 1];
    ++i;
  }
  return true;
}

int ExitCode(const std::string& command, const absl::Status& status) {
  if (status.ok()) return 0;
  std::cerr << "trellis " << command << ": " << status << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

// The job from JOB.yaml (or the built-in default) with --seed applied.
std::optional<trellis::v1::JobConfig> LoadJob(const std::string& command,
                                              const std::string& path,
                                              const std::string& seed) {
  absl::StatusOr<trellis::v1::JobConfig> loaded =
      path.empty() ? trellis::scheduler::DefaultJob() : trellis::config::LoadJobFile(path);
  if (!loaded.ok()) {
    std::cerr << "trellis " << command << ": " << loaded.status().message() << "\n";
    return std::nullopt;
  }
  if (!seed.empty()) {
    uint64_t value = 0;
    if (!absl::SimpleAtoi(seed, &value)) {
      std::cerr << "trellis " << command << ": --seed: expected a non-negative integer, found \""
                << seed << "\"\n";
      return std::nullopt;
    }
    loaded->mutable_runtime()->set_seed(value);
  }
  return *std::move(loaded);
}

// trellis run / trellis launch.
int RunOrLaunch(const std::string& command, const std::vector<std::string>& args) {
  std::map<std::string, std::string> flags;
  std::vector<std::string> positional;
  std::set<std::string> known = {"--out", "--seed", "--resume"};
  if (command == "launch") known.insert("--cluster");
  if (!ParseFlags(command, args, known, flags, positional)) return 2;
  if (positional.size() > 1) {
    std::cerr << "trellis " << command << ": more than one job file (" << positional[0] << ", "
              << positional[1] << ")\n" << kUsage;
    return 2;
  }
  const bool resume = flags.count("--resume") > 0;
  if (resume && (!positional.empty() || flags.count("--out") || flags.count("--seed"))) {
    std::cerr << "trellis " << command
              << ": --resume takes the job, output directory and seed from RUN_DIR; drop the "
                 "job file, --out and --seed\n" << kUsage;
    return 2;
  }
  if (resume && command == "run") {
    std::cout << "trellis run: resuming " << flags["--resume"] << std::endl;
    return ExitCode(command, trellis::scheduler::ResumeEmbeddedJob(flags["--resume"], std::cout));
  }
  std::optional<trellis::v1::JobConfig> job =
      resume ? LoadJob(command, flags["--resume"] + "/job.yaml", "")
             : LoadJob(command, positional.empty() ? "" : positional[0], flags["--seed"]);
  if (!job.has_value()) return 2;
  const std::string out_dir = resume               ? flags["--resume"]
                              : flags.count("--out") ? flags["--out"]
                                                     : job->runtime().out_dir();
  std::cout << "trellis " << command << ": job " << job->name() << " -> " << out_dir << std::endl;
  if (command == "run") {
    return ExitCode(command, trellis::scheduler::RunEmbeddedJob(*job, out_dir, std::cout));
  }
  trellis::v1::ClusterSpec cluster = trellis::launch::ThisHost();
  if (flags.count("--cluster")) {
    cluster.Clear();
    if (absl::Status s = trellis::config::LoadYamlFile(flags["--cluster"], &cluster); !s.ok()) {
      return ExitCode(command, s);
    }
  }
  return ExitCode(command, trellis::launch::LaunchLocal(*job, cluster, out_dir,
                                                        "/proc/self/exe", std::cout, resume));
}

int Serve(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cerr << "trellis serve: which role?\n" << kUsage;
    return 2;
  }
  std::map<std::string, std::string> flags;
  std::vector<std::string> positional;
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "scheduler") {
    if (!ParseFlags("serve", rest, {"--job", "--out", "--listen", "--address-file", "--resume"},
                    flags, positional)) {
      return 2;
    }
    std::optional<trellis::v1::JobConfig> job;
    if (flags.count("--job")) {
      job = LoadJob("serve", flags["--job"], "");
      if (!job.has_value()) return 2;
    }
    trellis::scheduler::SchedulerOptions options;
    if (flags.count("--listen")) options.listen = flags["--listen"];
    options.address_file = flags["--address-file"];
    if (flags.count("--resume")) {
      return ExitCode("serve", trellis::scheduler::ResumeScheduler(flags["--resume"], options,
                                                                   std::cout));
    }
    return ExitCode("serve", trellis::scheduler::ServeScheduler(job, flags["--out"], options,
                                                                std::cout));
  }
  absl::StatusOr<trellis::v1::Role> role = trellis::launch::ParseRole(args[0]);
  if (!role.ok()) return ExitCode("serve", role.status());
  if (!ParseFlags("serve", rest, {"--scheduler", "--listen", "--index"}, flags, positional)) {
    return 2;
  }
  trellis::launch::WorkerOptions options;
  options.role = *role;
  options.scheduler = flags["--scheduler"];
  if (options.scheduler.empty()) {
    std::cerr << "trellis serve: --scheduler HOST:PORT is required\n" << kUsage;
    return 2;
  }
  if (flags.count("--listen")) options.listen = flags["--listen"];
  if (flags.count("--index")) {
    int index = 0;
    if (!absl::SimpleAtoi(flags["--index"], &index) || index < 0) {
      std::cerr << "trellis serve: --index: expected a non-negative integer\n";
      return 2;
    }
    options.index = index;
  }
  return ExitCode("serve", trellis::launch::ServeWorker(options, std::cout));
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
  if (command == "run" || command == "launch") return RunOrLaunch(command, args);
  if (command == "serve") return Serve(args);
  if (command == "plan" || command == "probe" || command == "compare") {
    std::map<std::string, std::string> flags;
    std::vector<std::string> positional;
    if (!ParseFlags(command, args, trellis::cli::MeasureFlags(command), flags, positional)) {
      return 2;
    }
    return ExitCode(command,
                    trellis::cli::RunMeasureCommand(command, flags, positional, std::cout));
  }
  if (command == "verify") return trellis::verifier::VerifyCommand(args, std::cout, std::cerr,
                                                                trellis::verifier::RegisterRemoteVerifier);
  std::cerr << "trellis: unknown command '" << command << "'\n" << kUsage;
  return 2;
}
