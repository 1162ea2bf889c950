// runtime.num_threads on the default job: each thread count runs the
// default job, shortened (--sft_steps, --grpo_steps; every other field as
// `trellis run` has it) or whole (--whole_job: SFT to its target accuracy,
// every GRPO step, the evaluations), in a process of its own, since a
// process sizes its pools once. Per count: wall seconds, the process's CPU seconds
// (getrusage: all its threads), CPU / wall, the threads that did more than
// 5% of its CPU time (the cores it kept busy, to set against the count it
// was given, whatever share of them a loaded machine gave it) and wall
// time relative to the first count.
// Each run also prints the intra-op threads the job kept (the thread probe,
// model/thread_probe.h, keeps fewer than the count when more do not pay).
// --unprobed runs every count a second time with the intra-op pool forced
// to the count (as before the probe), side by side.
// --active runs every count once more as every Trellis process ran before
// (docs/threads.md): OMP_WAIT_POLICY=ACTIVE (libgomp's default, idle
// OpenMP threads spinning) and OpenBLAS on every core whatever the count.
//
//   build/bench/threads_bench [--threads=1,2] [--sft_steps=40] [--grpo_steps=4] [--whole_job]
//                             [--reps=2] [--unprobed] [--active] [--blas_threads=N]
//                             [--out=/tmp/threads_bench]

#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "config/threads.h"
#include "ledger/ledger.h"
#include "model/threads.h"
#include "run/embedded_job.h"

ABSL_FLAG(std::string, threads, "1,2", "runtime.num_threads values to compare");
ABSL_FLAG(int, sft_steps, 40, "SFT steps of each run (sft.target_accuracy off)");
ABSL_FLAG(int, grpo_steps, 4, "GRPO steps of each run");
ABSL_FLAG(bool, whole_job, false,
          "run the default job whole, as `trellis run` does (--sft_steps and --grpo_steps unused)");
ABSL_FLAG(int, reps, 2, "runs of each configuration, interleaved; the fastest counts");
ABSL_FLAG(bool, unprobed, false,
          "also run each count with the intra-op pool forced to the count (no probe)");
ABSL_FLAG(bool, active, false,
          "also run each count as before: OMP_WAIT_POLICY=ACTIVE, OpenBLAS on every core");
ABSL_FLAG(std::string, out, "/tmp/threads_bench", "directory for the runs");
ABSL_FLAG(int, child_threads, 0, "internal: run the job in this process with this count");
ABSL_FLAG(int, intra_op, 0, "internal: force the intra-op pool to this count (0: the job's)");
ABSL_FLAG(int, blas_threads, 0,
          "OpenBLAS's threads once the job sized the pools (0: as the job sized them)");

namespace trellis {
namespace {

struct Usage {
  double wall = 0;
  double cpu = 0;
  // Threads of the child that ran more than 5% of its CPU time: the cores
  // it kept busy, whatever share of them the machine gave it.
  int busy_threads = 0;
  // The intra-op threads the run computed on (its ledger's machine record).
  int intra_op = 0;
};

// How a run sizes its pools.
enum class Mode { kNow, kUnprobed, kActive };

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kNow: return "now";
    case Mode::kUnprobed: return "unprobed";
    case Mode::kActive: return "before";
  }
  return "";
}

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// This process's threads that used more than 5% of `cpu` seconds
// (/proc/self/task/TID/stat: utime and stime, in clock ticks).
int BusyThreads(double cpu) {
  int busy = 0;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Fields after the command's closing parenthesis: utime is the 12th.
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));
    std::string field;
    double ticks = 0;
    for (int i = 1; i <= 13 && fields >> field; ++i) {
      if (i >= 12) ticks += std::stod(field);
    }
    if (ticks / tick > 0.05 * cpu) ++busy;
  }
  return busy;
}

// The intra-op threads in the machine record of the run in `dir`; 0 when
// none is found.
int RecordedIntraOp(const std::string& dir) {
  std::ifstream in(dir + "/ledger.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.value("type", "") == "machine") {
      return record.value("intra_op_threads", 0);
    }
  }
  return 0;
}

// The child: one run of the job; prints "usage WALL CPU BUSY_THREADS
// INTRA_OP".
int RunChild(int threads) {
  absl::StatusOr<v1::JobConfig> job = run::DefaultJob();
  if (!job.ok()) {
    std::cerr << job.status() << "\n";
    return 1;
  }
  if (!absl::GetFlag(FLAGS_whole_job)) {
    job->mutable_sft()->set_steps(absl::GetFlag(FLAGS_sft_steps));
    job->mutable_sft()->set_target_accuracy(0);
    job->mutable_grpo()->set_steps(absl::GetFlag(FLAGS_grpo_steps));
  }
  job->mutable_runtime()->set_num_threads(threads);
  std::ostringstream progress;
  const double cpu_before = CpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  // The pools resized once the job has sized them (the observer runs right
  // after): the intra-op pool forced to the count (--unprobed), OpenBLAS to
  // --blas_threads, or every core as before (--active).
  const int intra_op = absl::GetFlag(FLAGS_intra_op);
  const int blas = absl::GetFlag(FLAGS_blas_threads);
  const run::LedgerObserver resize = [intra_op, blas](ledger::Ledger* ledger) {
    if (ledger == nullptr) return;
    if (intra_op > 0) model::SetThreads(intra_op);
    using SetBlasThreads = void (*)(int);
    if (auto set =
            reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
        set != nullptr && blas > 0) {
      set(blas);
    }
  };
  const std::string dir = absl::StrCat(absl::GetFlag(FLAGS_out), "/threads_", threads);
  const absl::Status s = run::RunEmbeddedJob(*job, dir, progress, resize);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!s.ok()) {
    std::cerr << s << "\n" << progress.str();
    return 1;
  }
  const double cpu = CpuSeconds() - cpu_before;
  // The machine record says what the job chose; a forced pool is the count.
  const int used = intra_op > 0 ? intra_op : RecordedIntraOp(dir);
  std::cout << absl::StrFormat("usage %.6f %.6f %d %d\n", wall, cpu, BusyThreads(cpu), used);
  return 0;
}

// Runs this program as a child with `threads` in `mode` and reads its usage
// line.
absl::StatusOr<Usage> RunOne(int threads, Mode mode) {
  const bool active = mode == Mode::kActive;
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    if (active) setenv("OMP_WAIT_POLICY", "ACTIVE", 1);
    const std::vector<std::string> flags = {
        absl::StrCat("--child_threads=", threads),
        absl::StrCat("--sft_steps=", absl::GetFlag(FLAGS_sft_steps)),
        absl::StrCat("--grpo_steps=", absl::GetFlag(FLAGS_grpo_steps)),
        absl::GetFlag(FLAGS_whole_job) ? "--whole_job=true" : "--whole_job=false",
        absl::StrCat("--out=", absl::GetFlag(FLAGS_out), "/", ModeName(mode)),
        absl::StrCat("--intra_op=", mode == Mode::kNow ? 0 : threads),
        absl::StrCat("--blas_threads=",
                     active ? config::PhysicalCores() : absl::GetFlag(FLAGS_blas_threads))};
    std::vector<char*> argv = {const_cast<char*>("threads_bench")};
    for (const std::string& f : flags) argv.push_back(const_cast<char*>(f.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string output;
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) output.append(buffer, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  Usage usage;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      std::sscanf(output.c_str(), "usage %lf %lf %d %d", &usage.wall, &usage.cpu,
                  &usage.busy_threads, &usage.intra_op) != 4) {
    return absl::InternalError(absl::StrCat("run with ", threads, " threads failed"));
  }
  return usage;
}

int Main() {
  std::vector<int> counts;
  for (absl::string_view t : absl::StrSplit(absl::GetFlag(FLAGS_threads), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(t, &n) || n < 1) {
      std::cerr << "--threads: \"" << t << "\" is not a positive count\n";
      return 2;
    }
    counts.push_back(n);
  }
  std::vector<Mode> modes = {Mode::kNow};
  if (absl::GetFlag(FLAGS_unprobed)) modes.push_back(Mode::kUnprobed);
  if (absl::GetFlag(FLAGS_active)) modes.push_back(Mode::kActive);
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  const std::string length =
      absl::GetFlag(FLAGS_whole_job)
          ? "whole"
          : absl::StrFormat("%d SFT + %d GRPO steps", absl::GetFlag(FLAGS_sft_steps),
                            absl::GetFlag(FLAGS_grpo_steps));
  std::cout << absl::StrFormat(
                   "default job, %s; %d physical cores; load average %.2f at the start\n", length,
                   config::PhysicalCores(), load[0])
            << std::flush;
  // The fastest of the interleaved repetitions of each (mode, count).
  std::map<std::pair<Mode, int>, Usage> best;
  for (int rep = 0; rep < absl::GetFlag(FLAGS_reps); ++rep) {
    for (const Mode mode : modes) {
      for (const int n : counts) {
        absl::StatusOr<Usage> u = RunOne(n, mode);
        if (!u.ok()) {
          std::cerr << u.status() << "\n";
          return 1;
        }
        std::cout << absl::StrFormat(
                         "  run %d: %s, %d threads (intra-op %d): wall %.2f s, cpu %.2f s, %d busy "
                         "threads\n",
                         rep + 1, ModeName(mode), n, u->intra_op, u->wall, u->cpu, u->busy_threads)
                  << std::flush;
        auto [it, fresh] = best.emplace(std::make_pair(mode, n), *u);
        if (!fresh && u->wall < it->second.wall) it->second = *u;
      }
    }
  }
  getloadavg(load, 3);
  std::cout << "fastest run of each:\n";
  std::cout << absl::StrFormat("%-9s %8s %9s %10s %10s %10s %8s %12s\n", "mode", "threads",
                               "intra-op", "wall s", "cpu s", "cpu/wall", "busy", "wall / 1st");
  for (const Mode mode : modes) {
    const double first = best[{mode, counts.front()}].wall;
    for (const int n : counts) {
      const Usage& u = best[{mode, n}];
      std::cout << absl::StrFormat("%-9s %8d %9d %10.2f %10.2f %10.2f %8d %12.2f\n", ModeName(mode),
                                   n, u.intra_op, u.wall, u.cpu, u.cpu / u.wall, u.busy_threads,
                                   u.wall / first);
    }
  }
  std::cout << absl::StrFormat("load average %.2f at the end\n", load[0]);
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  trellis::config::StartProcess(argv);
  absl::ParseCommandLine(argc, argv);
  if (const int n = absl::GetFlag(FLAGS_child_threads); n > 0) return trellis::RunChild(n);
  return trellis::Main();
}
