#include "launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "config/job_config.h"
#include "config/worker_id.h"
#include "env/env.h"
#include "env/run_dir.h"
#include "loop/recipe.h"
#include "model/device.h"
#include "run/checkpoint.h"
#include "run/run_dir_claim.h"
#include "scheduler/placement.h"

namespace trellis::launch {
namespace {

std::atomic<int> g_stop_signal{0};

void OnSignal(int sig) { g_stop_signal = sig; }

struct Child {
  explicit Child(const config::WorkerId& id) : id(id) {}
  const config::WorkerId id;
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
  std::thread reader;
};

std::string Describe(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return "unknown status";
}

// Starts `argv` with stdout and stderr into a pipe whose lines go to `out`
// prefixed with "[<its worker id>] ", with CUDA_VISIBLE_DEVICES set to
// `cuda_visible` when given (scheduler::CudaVisibleDevices). The child dies
// with the launcher.
absl::Status Spawn(Child& child, const std::vector<std::string>& argv,
                   const std::optional<std::string>& cuda_visible, std::ostream& out,
                   std::mutex& out_mu) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    if (cuda_visible) setenv("CUDA_VISIBLE_DEVICES", cuda_visible->c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  child.pid = pid;
  child.reader = std::thread([fd = fds[0], name = child.id.ToString(), &out, &out_mu] {
    FILE* in = fdopen(fd, "r");
    char* line = nullptr;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) > 0) {
      std::lock_guard<std::mutex> lock(out_mu);
      out << "[" << name << "] " << std::string(line, n);
      if (line[n - 1] != '\n') out << '\n';
      out.flush();
    }
    free(line);
    fclose(in);
  });
  return absl::OkStatus();
}

// Reaps whatever has exited; true if `child` has.
void Reap(std::vector<std::unique_ptr<Child>>& children) {
  for (auto& c : children) {
    if (c->exited) continue;
    int status = 0;
    if (waitpid(c->pid, &status, WNOHANG) == c->pid) {
      c->exited = true;
      c->status = status;
    }
  }
}

// SIGTERM to every live child, SIGKILL to those still there after `grace`.
void TearDown(std::vector<std::unique_ptr<Child>>& children, absl::Duration grace) {
  for (auto& c : children) {
    if (!c->exited) kill(c->pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  while (absl::Now() < deadline) {
    Reap(children);
    bool all = true;
    for (auto& c : children) all = all && c->exited;
    if (all) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (auto& c : children) {
    if (c->exited) continue;
    kill(c->pid, SIGKILL);
    waitpid(c->pid, &c->status, 0);
    c->exited = true;
  }
  for (auto& c : children) {
    if (c->reader.joinable()) c->reader.join();
  }
}


bool IsThisHost(const std::string& host) {
  if (host == "127.0.0.1" || host == "localhost" || host == "::1") return true;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return host == name;
}

}  // namespace

v1::ClusterSpec ThisHost() {
  int gpus = 0;
  std::error_code ec;
  while (std::filesystem::exists(absl::StrCat("/dev/nvidia", gpus), ec)) ++gpus;
  return scheduler::LocalCluster(gpus, static_cast<int>(std::thread::hardware_concurrency()));
}

namespace {

// The part of a launch every attempt shares.
struct LaunchPlan {
  std::vector<scheduler::WorkerPlacement> placed;
  std::string out_dir;
  std::string trellis_binary;
  std::string http;
  std::ostream* progress;
  // What every process is started with: --secret-file FILE, or --insecure.
  std::vector<std::string> security;
};

struct AttemptResult {
  absl::Status status;
  // The failure is one a restart from the newest checkpoint may mend: a
  // role other than the scheduler died or failed (every actor, or the one
  // learner, reference or verifier), the scheduler was killed by a signal,
  // or it ended with a retryable status (cli's exit code kExitRetryable).
  bool restartable = false;
};

bool ExitedOk(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// What made the attempt fail, once the scheduler or a worker has ended
// badly; OK while nothing has.
AttemptResult Failure(const std::vector<std::unique_ptr<Child>>& children) {
  int actors = 0, failed_actors = 0;
  for (const auto& c : children) {
    if (c->id.role() == v1::ACTOR) {
      ++actors;
      failed_actors += c->exited && !ExitedOk(c->status);
    }
  }
  for (const auto& c : children) {
    const v1::Role role = c->id.role();
    if (!c->exited || ExitedOk(c->status) || role == v1::SCHEDULER) continue;
    if (role == v1::ACTOR && failed_actors < actors) continue;  // others take its work
    return {absl::UnavailableError(absl::StrCat(
                c->id.ToString(), role == v1::ACTOR ? " (the last actor)" : "", " exited (",
                Describe(c->status), ") during the job")),
            true};
  }
  const Child& scheduler = *children.front();
  if (scheduler.exited && !ExitedOk(scheduler.status)) {
    const int s = scheduler.status;
    return {absl::UnavailableError(absl::StrCat("the scheduler failed (", Describe(s), ")")),
            WIFSIGNALED(s) || (WIFEXITED(s) && WEXITSTATUS(s) == kExitRetryable)};
  }
  return {};
}

AttemptResult RunAttempt(const LaunchPlan& plan, bool resume) {
  env::Env* const env = env::Env::Default();
  const env::RunDir run(plan.out_dir);
  const std::string address_file = run.LaunchSchedulerAddress();
  if (absl::Status s = env->RemoveAll(address_file); !s.ok()) return {s};
  std::ostream& progress = *plan.progress;
  std::mutex out_mu;
  std::vector<std::unique_ptr<Child>> children;
  auto start = [&](const config::WorkerId& id, std::vector<std::string> argv,
                   const std::optional<std::string>& cuda_visible) {
    children.push_back(std::make_unique<Child>(id));
    argv.insert(argv.begin(), plan.trellis_binary);
    argv.insert(argv.end(), plan.security.begin(), plan.security.end());
    return Spawn(*children.back(), argv, cuda_visible, progress, out_mu);
  };
  std::vector<std::string> scheduler_args = {"serve", config::RoleName(v1::SCHEDULER),
                                             "--address-file", address_file};
  for (const std::string& a :
       resume ? std::vector<std::string>{"--resume", plan.out_dir}
              : std::vector<std::string>{"--job", run.LaunchJobYaml(), "--out", plan.out_dir}) {
    scheduler_args.push_back(a);
  }
  if (!plan.http.empty()) {
    scheduler_args.push_back("--http");
    scheduler_args.push_back(plan.http);
  }
  AttemptResult result{start(config::WorkerId(v1::SCHEDULER), scheduler_args, std::nullopt)};
  // The scheduler's bound address, once it serves.
  std::string scheduler;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (result.status.ok() && scheduler.empty()) {
    std::ifstream in(address_file);
    if (in && std::getline(in, scheduler) && !scheduler.empty()) break;
    scheduler.clear();
    Reap(children);
    if (children[0]->exited) {
      result = Failure(children);
      if (result.status.ok()) {
        result.status = absl::InternalError("the scheduler exited before serving");
      }
    } else if (absl::Now() > deadline) {
      result.status = absl::DeadlineExceededError("the scheduler did not start serving within 60 s");
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (const scheduler::WorkerPlacement& p : plan.placed) {
    if (!result.status.ok()) break;
    // A tensor-parallel replica is one process whose ranks are its threads
    // (model/tensor_parallel.h): it starts at its rank-0 placement, seeing
    // its ranks' GPUs on that node.
    if (p.tp_rank > 0) continue;
    result.status = start(p.id,
                          {"serve", config::RoleName(p.id.role()), "--scheduler", scheduler,
                           "--index", absl::StrCat(p.id.index())},
                          scheduler::CudaVisibleDevices(plan.placed, p));
  }
  if (result.status.ok()) {
    std::string table;
    for (auto& c : children) absl::StrAppend(&table, c->id.ToString(), "\t", c->pid, "\n");
    result.status = env->WriteFileAtomically(run.LaunchProcesses(), table);
  }

  // Until the scheduler ends the job, a signal arrives, or a role that
  // cannot be replaced fails. A worker that exits 0 was told by the
  // scheduler that the job is over.
  while (result.status.ok()) {
    Reap(children);
    if (g_stop_signal != 0) {
      result.status =
          absl::CancelledError(absl::StrCat("stopped by signal ", g_stop_signal.load()));
      break;
    }
    result = Failure(children);
    if (!result.status.ok() || children[0]->exited) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  {
    std::lock_guard<std::mutex> lock(out_mu);
    progress << "[launch] "
             << (result.status.ok() ? "job finished" : std::string(result.status.message()))
             << "; stopping every process" << std::endl;
  }
  // Workers exit by themselves once the scheduler says the job is over.
  TearDown(children, absl::Seconds(result.status.ok() ? 5 : 2));
  for (auto& c : children) {
    if (c->id.role() == v1::ACTOR && !ExitedOk(c->status)) {
      progress << "[launch] " << c->id.ToString() << " ended with " << Describe(c->status)
               << std::endl;
    }
  }
  return result;
}

}  // namespace

absl::Status LaunchLocal(const v1::JobConfig& given, const v1::ClusterSpec& cluster,
                         const std::string& out_dir, const std::string& trellis_binary,
                         std::ostream& progress, bool resume, const std::string& http,
                         const SecretSource& secret) {
  // Resolved once (the model's shape from model.path's config.json) and
  // bound to out_dir as run::RunJob binds it: the job placed, written to
  // OUT/launch/job.yaml and served to every worker, the same as OUT/job.yaml.
  v1::JobConfig job = given;
  if (absl::Status s = loop::PrepareJob(&job); !s.ok()) return s;
  job.mutable_runtime()->set_out_dir(out_dir);
  if (absl::Status s = model::CheckDeviceVisible(job); !s.ok()) return s;
  absl::StatusOr<std::vector<scheduler::WorkerPlacement>> placed = scheduler::Place(job, cluster);
  if (!placed.ok()) return placed.status();
  for (const scheduler::WorkerPlacement& p : *placed) {
    if (!IsThisHost(p.host)) {
      return absl::FailedPreconditionError(absl::StrCat(
          p.id.ToString(), " is placed on node ", p.node, " (host ", p.host,
          "); trellis launch starts processes on this host only"));
    }
  }
  // Held until the last attempt ends; the processes it starts do not hold it.
  absl::StatusOr<std::unique_ptr<env::RunDirLock>> lock = run::ClaimRunDir(job, out_dir);
  if (!lock.ok()) return lock.status();
  env::Env* const env = env::Env::Default();
  const env::RunDir run(out_dir);
  if (absl::Status s = env->CreateDir(run.Launch()); !s.ok()) return s;
  if (absl::Status s = env->WriteFileAtomically(run.LaunchJobYaml(), config::ResolvedJobYaml(job));
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> secret_file = LaunchSecretFile(secret, run.LaunchSecret());
  if (!secret_file.ok()) return secret_file.status();
  if (!secret_file->empty()) {
    progress << "[launch] every call to the job's services needs its secret (" << *secret_file
             << ")" << std::endl;
  }
  const LaunchPlan plan{*std::move(placed), out_dir, trellis_binary, http, &progress,
                        secret_file->empty()
                            ? std::vector<std::string>{"--insecure"}
                            : std::vector<std::string>{"--secret-file", *secret_file}};

  g_stop_signal = 0;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  struct sigaction old_int, old_term;
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  absl::Cleanup restore_signals = [&] {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  };

  // Restarts (launch/restarts.tsv): one line each, with what failed and
  // where the next attempt went on from.
  std::string restarts = "attempt\tcause\tresumed_from\n";
  const int max_restarts = job.deployment().max_restarts();
  for (int attempt = 0;; ++attempt) {
    AttemptResult result = RunAttempt(plan, resume);
    if (result.status.ok() || !result.restartable || g_stop_signal != 0) return result.status;
    if (attempt == max_restarts) {
      return absl::Status(result.status.code(),
                          absl::StrCat(result.status.message(), " (", max_restarts,
                                       " restarts used: deployment.max_restarts)"));
    }
    // The newest checkpoint, or the start when the run has none yet.
    absl::StatusOr<run::Checkpoint> checkpoint = run::ReadLatestCheckpoint(env, out_dir);
    if (!checkpoint.ok() && !absl::IsNotFound(checkpoint.status())) {
      return absl::Status(checkpoint.status().code(),
                          absl::StrCat(result.status.message(), "; cannot restart: ",
                                       checkpoint.status().message()));
    }
    resume = checkpoint.ok();
    const std::string from = resume ? checkpoint->dir : "the start";
    progress << "[launch] restart " << attempt + 1 << " of " << max_restarts << ": "
             << result.status.message() << "; going on from " << from << std::endl;
    absl::StrAppend(&restarts, attempt + 1, "\t", result.status.message(), "\t", from, "\n");
    if (absl::Status s = env->WriteFileAtomically(run.LaunchRestarts(), restarts); !s.ok()) {
      return s;
    }
  }
}

}  // namespace trellis::launch
