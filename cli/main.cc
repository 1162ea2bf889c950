// The `trellis` command.
//
//   trellis run [JOB.yaml] [--out DIR] [--seed N] [--override FILE] [--http HOST:PORT]
//       Runs a job with every role in this process. Without JOB.yaml it runs
//       the built-in default: GRPO on the arithmetic task, on CPU.
//   trellis run --resume RUN_DIR
//       Continues the run in RUN_DIR from its newest checkpoint.
//   trellis launch [JOB.yaml] [--out DIR] [--seed N] [--override FILE] [--cluster CLUSTER.yaml]
//                  [--http HOST:PORT] [--secret-file FILE | --insecure]
//   trellis launch --resume RUN_DIR [--cluster CLUSTER.yaml] [--http HOST:PORT]
//       The same job with the scheduler and every role a process of its own.
//   trellis serve ROLE --scheduler ADDR [--listen HOST:PORT] [--advertise HOST]
//                      [--index K] [--transport-port PORT] [--metrics HOST:PORT]
//   trellis serve scheduler [--job JOB.yaml] [--out DIR] [--listen HOST:PORT] [--advertise HOST]
//                           [--address-file FILE] [--resume RUN_DIR] [--http HOST:PORT]
//   trellis serve environment --job JOB.yaml --listen HOST:PORT [--address-file FILE]
//       One service, as a launcher, Slurm or Kubernetes starts it, with the job's secret
//       (--secret-file FILE or $TRELLIS_SECRET_FILE) or --insecure. --http: the dashboard and
//       the job's Prometheus /metrics (web/watch_server.h); --metrics: a worker's own /metrics.
//   trellis report RUN_DIR
//       RUN_DIR/report.html: the dashboard of a finished run as one file; a few eval answers.
//   trellis tokenize | chat ...   Token ids, chat renders (tools/answer_commands.h).
//   trellis resolve [JOB.yaml] [--override FILE] [--seed N]
//       Validates a job and prints it with every default filled in.
//   trellis place [JOB.yaml] [--cluster CLUSTER.yaml]
//       Prints where each worker of the job goes (scheduler/placement.h).
//   trellis verify --verifier NAME [--config KEY=VALUE ...] [--items] DATA.jsonl
//       Scores samples with one verifier, no training (tools/verify_command.h).
//   trellis plan | probe | compare ...
//       Memory and step-time plans, pressure probes, comparisons (tools/measure_commands.h).

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "cli/usage.h"
#include "config/job_config.h"
#include "config/printable.h"
#include "config/threads.h"
#include "env/run_dir.h"
#include "environment_service/environment_service.h"
#include "launch/environment_server.h"
#include "launch/launcher.h"
#include "launch/secret.h"
#include "launch/worker.h"
#include "loop/recipe.h"
#include "roles/local_roles.h"
#include "rpc/auth.h"
#include "run/embedded_job.h"
#include "run/run_dir_claim.h"
#include "scheduler/distributed_job.h"
#include "scheduler/placement.h"
#include "tools/answer_commands.h"
#include "tools/measure_commands.h"
#include "tools/verify_command.h"
#include "verifier/verifier_service.h"
#include "web/report.h"
#include "web/watch_server.h"

namespace {

using trellis::cli::kUsage;
using trellis::config::Printable;

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

// Removes every `name` (a flag without a value) from args; true if there was one.
bool TakeSwitch(std::vector<std::string>& args, const std::string& name) {
  const size_t before = args.size();
  args.erase(std::remove(args.begin(), args.end(), name), args.end());
  return args.size() != before;
}

int ExitCode(const std::string& command, const absl::Status& status) {
  if (status.ok()) return 0;
  std::cerr << "trellis " << command << ": " << Printable(status.ToString(), 0, "\n") << "\n";
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument: return trellis::launch::kExitInvalidInput;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDeadlineExceeded: return trellis::launch::kExitRetryable;
    default: return 1;
  }
}

// Sets runtime.seed from --seed (when given); false after saying why when
// it is not a number.
bool ApplySeed(const std::string& command, const std::string& seed,
               trellis::v1::JobConfig& job) {
  if (seed.empty()) return true;
  uint64_t value = 0;
  if (!absl::SimpleAtoi(seed, &value)) {
    std::cerr << "trellis " << command << ": --seed: expected a non-negative integer, found \""
              << seed << "\"\n";
    return false;
  }
  job.mutable_runtime()->set_seed(value);
  return true;
}

// The job from JOB.yaml (or the built-in default), then the fields of the
// --override file (if any), then --seed (which wins over the override's).
std::optional<trellis::v1::JobConfig> LoadJob(const std::string& command,
                                              const std::string& path,
                                              const std::string& seed,
                                              const std::string& override_path = "") {
  absl::StatusOr<trellis::v1::JobConfig> loaded =
      path.empty() ? trellis::run::DefaultJob() : trellis::config::LoadJobFile(path);
  if (loaded.ok() && !override_path.empty()) {
    if (absl::Status s = trellis::config::LoadYamlFile(override_path, &*loaded); !s.ok()) {
      loaded = s;
    }
  }
  if (!loaded.ok()) {
    std::cerr << "trellis " << command << ": " << Printable(loaded.status().message(), 0, "\n")
              << "\n";
    return std::nullopt;
  }
  if (!ApplySeed(command, seed, *loaded)) return std::nullopt;
  return *std::move(loaded);
}

// Attaches `watch` (may be null) to the run's ledger.
trellis::run::LedgerObserver Observer(trellis::web::WatchServer* watch) {
  if (watch == nullptr) return nullptr;
  return [watch](trellis::ledger::Ledger* ledger) { watch->Attach(ledger); };
}

// The cluster of --cluster FILE, or this host as the pool "local".
absl::StatusOr<trellis::v1::ClusterSpec> LoadCluster(std::map<std::string, std::string>& flags) {
  if (!flags.count("--cluster")) return trellis::launch::ThisHost();
  trellis::v1::ClusterSpec cluster;
  if (absl::Status s = trellis::config::LoadYamlFile(flags["--cluster"], &cluster); !s.ok()) {
    return s;
  }
  return cluster;
}

// trellis run / trellis launch.
int RunOrLaunch(const std::string& command, std::vector<std::string> args) {
  std::map<std::string, std::string> flags;
  std::vector<std::string> positional;
  std::set<std::string> known = {"--out", "--seed", "--override", "--resume", "--http"};
  const bool insecure = command == "launch" && TakeSwitch(args, "--insecure");
  if (command == "launch") known.insert({"--cluster", "--secret-file"});
  if (!ParseFlags(command, args, known, flags, positional)) return 2;
  if (positional.size() > 1) {
    std::cerr << "trellis " << command << ": more than one job file (" << positional[0] << ", "
              << positional[1] << ")\n" << kUsage;
    return 2;
  }
  const bool resume = flags.count("--resume") > 0;
  if (resume && (!positional.empty() || flags.count("--out") || flags.count("--seed") ||
                 flags.count("--override"))) {
    std::cerr << "trellis " << command
              << ": --resume takes the job, output directory and seed from RUN_DIR; drop the "
                 "job file, --out, --seed and --override\n" << kUsage;
    return 2;
  }
  std::optional<trellis::v1::JobConfig> job =
      resume ? LoadJob(command, trellis::env::RunDir(flags["--resume"]).JobYaml(), "")
             : LoadJob(command, positional.empty() ? "" : positional[0], flags["--seed"],
                       flags["--override"]);
  if (!job.has_value()) return 2;
  const std::string out_dir = resume               ? flags["--resume"]
                              : flags.count("--out") ? flags["--out"]
                                                     : job->runtime().out_dir();
  std::cout << "trellis " << command << ": job " << Printable(job->name(), 200)
            << (resume ? " resumed in " : " -> ") << Printable(out_dir) << std::endl;
  if (command == "run") {
    // Before anything is written there (the dashboard's address too); a
    // launch takes it in LaunchLocal.
    absl::StatusOr<std::unique_ptr<trellis::env::RunDirLock>> lock =
        trellis::run::ClaimRunDir(*job, out_dir);
    if (!lock.ok()) return ExitCode(command, lock.status());
    absl::StatusOr<std::unique_ptr<trellis::web::WatchServer>> watch = trellis::web::StartRunWatch(
        flags["--http"], out_dir, job->name(), job->algorithm(), std::cout);
    if (!watch.ok()) return ExitCode(command, watch.status());
    return ExitCode(
        command,
        resume ? trellis::run::ResumeEmbeddedJob(out_dir, std::cout, Observer(watch->get()))
               : trellis::run::RunEmbeddedJob(*job, out_dir, std::cout, Observer(watch->get())));
  }
  absl::StatusOr<trellis::v1::ClusterSpec> cluster = LoadCluster(flags);
  if (!cluster.ok()) return ExitCode(command, cluster.status());
  if (insecure) {
    std::cerr << "trellis launch: --insecure: the job's services take calls from anyone who "
                 "can reach their ports\n";
  }
  return ExitCode(command, trellis::launch::LaunchLocal(*job, *cluster, out_dir, "/proc/self/exe",
                                                        std::cout, resume, flags["--http"],
                                                        {flags["--secret-file"], insecure}));
}

// trellis resolve / trellis place: what a job is, and where it would run.
int ResolveOrPlace(const std::string& command, const std::vector<std::string>& args) {
  std::map<std::string, std::string> flags;
  std::vector<std::string> positional;
  const std::set<std::string> known = command == "resolve"
                                          ? std::set<std::string>{"--seed", "--override"}
                                          : std::set<std::string>{"--cluster"};
  if (!ParseFlags(command, args, known, flags, positional)) return 2;
  if (positional.size() > 1) {
    std::cerr << "trellis " << command << ": more than one job file (" << positional[0] << ", "
              << positional[1] << ")\n" << kUsage;
    return 2;
  }
  std::optional<trellis::v1::JobConfig> job = LoadJob(
      command, positional.empty() ? "" : positional[0], flags["--seed"], flags["--override"]);
  if (!job.has_value()) return 2;
  if (command == "resolve") {
    if (absl::Status s = trellis::loop::PrepareJob(&*job); !s.ok()) return ExitCode(command, s);
    std::cout << trellis::config::ResolvedJobYaml(*job);
    return 0;
  }
  absl::StatusOr<trellis::v1::ClusterSpec> cluster = LoadCluster(flags);
  if (!cluster.ok()) return ExitCode(command, cluster.status());
  absl::StatusOr<std::vector<trellis::scheduler::WorkerPlacement>> placed =
      trellis::scheduler::Place(*job, *cluster);
  if (!placed.ok()) return ExitCode(command, placed.status());
  std::cout << trellis::scheduler::PlacementTable(*placed);
  return 0;
}

// Sets the secret every server of this process checks and every channel
// sends (launch/secret.h); false after saying why there is none.
bool SetServeSecret(const std::string& file, bool insecure) {
  absl::StatusOr<trellis::rpc::JobSecret> secret = trellis::launch::ServeSecret({file, insecure});
  if (!secret.ok()) {
    std::cerr << "trellis serve: " << secret.status().message() << "\n";
    return false;
  }
  if (insecure) std::cerr << "trellis serve: --insecure: anyone who reaches the port may call\n";
  trellis::rpc::SetProcessSecret(*secret);
  return true;
}

int Serve(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cerr << "trellis serve: which role?\n" << kUsage;
    return 2;
  }
  std::map<std::string, std::string> flags;
  std::vector<std::string> positional;
  std::vector<std::string> rest(args.begin() + 1, args.end());
  const bool insecure = TakeSwitch(rest, "--insecure");
  if (args[0] == "scheduler") {
    if (!ParseFlags("serve", rest,
                    {"--job", "--out", "--listen", "--advertise", "--address-file", "--resume",
                     "--http", "--secret-file"},
                    flags, positional) ||
        !SetServeSecret(flags["--secret-file"], insecure)) {
      return 2;
    }
    std::optional<trellis::v1::JobConfig> job;
    if (flags.count("--job")) {
      job = LoadJob("serve", flags["--job"], "");
      if (!job.has_value()) return 2;
    }
    trellis::scheduler::SchedulerOptions options;
    if (flags.count("--listen")) options.listen = flags["--listen"];
    options.advertise = flags["--advertise"];
    options.address_file = flags["--address-file"];
    options.http = flags["--http"];
    if (flags.count("--resume")) {
      return ExitCode("serve", trellis::scheduler::ResumeScheduler(flags["--resume"], options,
                                                                   std::cout));
    }
    return ExitCode("serve", trellis::scheduler::ServeScheduler(job, flags["--out"], options,
                                                                std::cout));
  }
  if (args[0] == "environment") {
    if (!ParseFlags("serve", rest,
                    {"--job", "--listen", "--advertise", "--address-file", "--secret-file"}, flags,
                    positional) ||
        !SetServeSecret(flags["--secret-file"], insecure)) {
      return 2;
    }
    return ExitCode(
        "serve", trellis::launch::ServeEnvironment({flags["--job"], flags["--listen"],
                                                    flags["--advertise"], flags["--address-file"]},
                                                   std::cout));
  }
  absl::StatusOr<trellis::v1::Role> role = trellis::launch::ParseRole(args[0]);
  if (!role.ok()) return ExitCode("serve", role.status());
  if (!ParseFlags("serve", rest,
                  {"--scheduler", "--listen", "--advertise", "--index", "--transport-port",
                   "--metrics", "--secret-file"},
                  flags, positional) ||
      !SetServeSecret(flags["--secret-file"], insecure)) {
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
  options.metrics = flags["--metrics"];
  options.advertise = flags["--advertise"];
  if (flags.count("--index")) {
    int index = 0;
    if (!absl::SimpleAtoi(flags["--index"], &index) || index < 0) {
      std::cerr << "trellis serve: --index: expected a non-negative integer\n";
      return 2;
    }
    options.index = index;
  }
  if (flags.count("--transport-port") &&
      (!absl::SimpleAtoi(flags["--transport-port"], &options.transport_port) ||
       options.transport_port < 1 || options.transport_port > 65535)) {
    std::cerr << "trellis serve: --transport-port: expected a port in 1..65535\n";
    return 2;
  }
  return ExitCode("serve", trellis::launch::ServeWorker(options, std::cout));
}

// trellis report RUN_DIR.
int Report(const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0].rfind("--", 0) == 0) {
    std::cerr << "trellis report: expected one RUN_DIR\n" << kUsage;
    return 2;
  }
  absl::StatusOr<std::string> path = trellis::web::WriteReport(args[0]);
  if (!path.ok()) return ExitCode("report", path.status());
  std::cout << "trellis report: wrote " << *path << "\n" << trellis::tools::EvalSample(args[0]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  trellis::config::StartProcess(argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  trellis::roles::AddVerifierKinds(trellis::verifier::RegisterRemoteVerifier);
  trellis::roles::AddEnvironmentKinds(trellis::environment::RegisterRemoteEnvironment);
  // Other commands' channels (a remote verifier's) send the secret named
  // by $TRELLIS_SECRET_FILE, when set.
  if (const char* file = std::getenv(trellis::rpc::kSecretFileEnv);
      file != nullptr && command != "serve" && command != "launch") {
    absl::StatusOr<trellis::rpc::JobSecret> secret = trellis::rpc::JobSecret::ReadFile(file);
    if (!secret.ok()) return ExitCode(command, secret.status());
    trellis::rpc::SetProcessSecret(*secret);
  }
  if (command == "run" || command == "launch") return RunOrLaunch(command, args);
  if (command == "serve") return Serve(args);
  if (command == "report") return Report(args);
  if (command == "resolve" || command == "place") return ResolveOrPlace(command, args);
  if (command == "plan" || command == "probe" || command == "compare") {
    std::map<std::string, std::string> flags;
    std::vector<std::string> positional;
    if (!ParseFlags(command, args, trellis::tools::MeasureFlags(command), flags, positional)) {
      return 2;
    }
    return ExitCode(command,
                    trellis::tools::RunMeasureCommand(command, flags, positional, std::cout));
  }
  if (command == "verify") return trellis::tools::VerifyCommand(args, std::cout, std::cerr);
  if (command == "tokenize" || command == "chat") return trellis::tools::TextCommand(command, args);
  std::cerr << "trellis: unknown command '" << command << "'\n" << kUsage;
  return 2;
}
