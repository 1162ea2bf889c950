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
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "env/env.h"
#include "env/run_dir.h"
#include "absl/time/clock.h"
#include "absl/strings/str_join.h"
#include "config/job_config.h"
#include "config/worker_id.h"
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
// prefixed with "[<its worker id>] ". The child dies with the launcher.
absl::Status Spawn(Child& child, const std::vector<std::string>& argv,
                   const std::vector<int>& gpus, std::ostream& out, std::mutex& out_mu) {
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
    if (!gpus.empty()) setenv("CUDA_VISIBLE_DEVICES", absl::StrJoin(gpus, ",").c_str(), 1);
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

absl::Status LaunchLocal(const v1::JobConfig& job, const v1::ClusterSpec& cluster,
                         const std::string& out_dir, const std::string& trellis_binary,
                         std::ostream& progress, bool resume, const std::string& http,
                         const SecretSource& secret) {
  absl::StatusOr<std::vector<scheduler::WorkerPlacement>> placed = scheduler::Place(job, cluster);
  if (!placed.ok()) return placed.status();
  for (const scheduler::WorkerPlacement& p : *placed) {
    if (!IsThisHost(p.host)) {
      return absl::FailedPreconditionError(absl::StrCat(
          p.id.ToString(), " is placed on node ", p.node, " (host ", p.host,
          "); trellis launch starts processes on this host only"));
    }
  }
  env::Env* const env = env::Env::Default();
  const env::RunDir run(out_dir);
  if (absl::Status s = env->CreateDir(run.Launch()); !s.ok()) return s;
  const std::string job_path = run.LaunchJobYaml();
  const std::string address_file = run.LaunchSchedulerAddress();
  if (absl::Status s = env->RemoveAll(address_file); !s.ok()) return s;
  if (absl::Status s = env->WriteFileAtomically(job_path, config::ResolvedJobYaml(job)); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> secret_file = LaunchSecretFile(secret, run.LaunchSecret());
  if (!secret_file.ok()) return secret_file.status();
  const std::vector<std::string> security =
      secret_file->empty() ? std::vector<std::string>{"--insecure"}
                           : std::vector<std::string>{"--secret-file", *secret_file};
  if (!secret_file->empty()) {
    progress << "[launch] every call to the job's services needs its secret (" << *secret_file
             << ")" << std::endl;
  }

  g_stop_signal = 0;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  struct sigaction old_int, old_term;
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);

  std::mutex out_mu;
  std::vector<std::unique_ptr<Child>> children;
  auto start = [&](const config::WorkerId& id, std::vector<std::string> argv,
                   const std::vector<int>& gpus) {
    children.push_back(std::make_unique<Child>(id));
    argv.insert(argv.begin(), trellis_binary);
    argv.insert(argv.end(), security.begin(), security.end());
    return Spawn(*children.back(), argv, gpus, progress, out_mu);
  };
  std::vector<std::string> scheduler_args = {"serve", config::RoleName(v1::SCHEDULER),
                                             "--address-file", address_file};
  for (const std::string& a : resume ? std::vector<std::string>{"--resume", out_dir}
                                     : std::vector<std::string>{"--job", job_path, "--out", out_dir}) {
    scheduler_args.push_back(a);
  }
  if (!http.empty()) {
    scheduler_args.push_back("--http");
    scheduler_args.push_back(http);
  }
  absl::Status status = start(config::WorkerId(v1::SCHEDULER), scheduler_args, {});
  // The scheduler's bound address, once it serves.
  std::string scheduler;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (status.ok() && scheduler.empty()) {
    std::ifstream in(address_file);
    if (in && std::getline(in, scheduler) && !scheduler.empty()) break;
    scheduler.clear();
    Reap(children);
    if (children[0]->exited) {
      status = absl::InternalError(absl::StrCat("the scheduler exited before serving (",
                                                Describe(children[0]->status), ")"));
    } else if (absl::Now() > deadline) {
      status = absl::DeadlineExceededError("the scheduler did not start serving within 60 s");
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (const scheduler::WorkerPlacement& p : *placed) {
    if (!status.ok()) break;
    status = start(p.id, {"serve", config::RoleName(p.id.role()), "--scheduler", scheduler,
                          "--index", absl::StrCat(p.id.index())},
                   p.gpus);
  }
  if (status.ok()) {
    std::string table;
    for (auto& c : children) absl::StrAppend(&table, c->id.ToString(), "\t", c->pid, "\n");
    status = env->WriteFileAtomically(run.LaunchProcesses(), table);
  }

  // Until the scheduler ends the job, a signal arrives, or a role that
  // cannot be replaced fails.
  while (status.ok()) {
    Reap(children);
    if (g_stop_signal != 0) {
      status = absl::CancelledError(absl::StrCat("stopped by signal ", g_stop_signal.load()));
      break;
    }
    if (children[0]->exited) {
      const int s = children[0]->status;
      if (!(WIFEXITED(s) && WEXITSTATUS(s) == 0)) {
        status = absl::InternalError(absl::StrCat("the scheduler failed (", Describe(s), ")"));
      }
      break;
    }
    // A worker that exits 0 was told by the scheduler that the job is over.
    for (auto& c : children) {
      if (!c->exited || c->id.role() == v1::SCHEDULER || c->id.role() == v1::ACTOR ||
          (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0)) {
        continue;
      }
      status = absl::InternalError(
          absl::StrCat(c->id.ToString(), " exited (", Describe(c->status), ") during the job"));
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  {
    std::lock_guard<std::mutex> lock(out_mu);
    progress << "[launch] " << (status.ok() ? "job finished" : std::string(status.message()))
             << "; stopping every process" << std::endl;
  }
  // Workers exit by themselves once the scheduler says the job is over.
  TearDown(children, absl::Seconds(status.ok() ? 5 : 2));
  for (auto& c : children) {
    if (c->id.role() == v1::ACTOR && !(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0)) {
      progress << "[launch] " << c->id.ToString() << " ended with " << Describe(c->status)
               << std::endl;
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return status;
}

}  // namespace trellis::launch
