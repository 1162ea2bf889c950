// A run directory is its owner's, and has one writer at a time
// (runtime.run_dir_access, env/run_dir_lock.h, run/run_dir_claim.h):
//  - every directory and file that an embedded run, a launched run (its
//    scheduler and its workers) and their Hugging Face export write is 0700
//    and 0600, from a shell whose umask is 022; with run_dir_access: group
//    0750 and 0640, the job's secret still 0600;
//  - while a run or a launch holds its directory (stopped after its first
//    checkpoint, so that it holds it for as long as the test needs), a
//    second `run --resume`, `launch --resume`, `run --out` or `launch --out`
//    into it fails at once, naming the directory and the holder's pid, and
//    changes nothing; once the holder is killed with SIGKILL, `--resume`
//    goes on to the end.

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loop/recipe.h"
#include "tests/launch_util.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing_util::ExitedOk;
using testing_util::Slurp;
using testing_util::StartTrellis;
using testing_util::Wait;
using testing_util::WaitFor;
using testing_util::WriteText;

// The tiny job with a checkpoint after each of its GRPO steps, one actor.
v1::JobConfig TinyJob() {
  v1::JobConfig job = testing_util::TinyJob();
  job.mutable_runtime()->set_checkpoint_every(1);
  job.mutable_deployment()->mutable_actor()->set_count(1);
  return job;
}

// The same from a Hugging Face directory, so that the run exports one.
v1::JobConfig HfJob() {
  v1::JobConfig job = testing_util::OnQwen2Arith(TinyJob());
  job.mutable_sft()->set_steps(2);
  job.mutable_grpo()->set_steps(2);
  EXPECT_TRUE(loop::PrepareJob(&job).ok());
  return job;
}

// "path: mode" of `dir` and of everything under it whose mode is not
// `dirs` (a directory) or `files` (anything else), or `other`'s for the
// relative paths it names.
std::vector<std::string> WrongModes(const fs::path& dir, mode_t dirs, mode_t files,
                                    const std::map<std::string, mode_t>& other = {}) {
  std::vector<std::string> wrong;
  auto check = [&](const fs::path& path) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      wrong.push_back(path.string() + ": cannot stat");
      return;
    }
    const std::string name = fs::relative(path, dir).string();
    mode_t want = S_ISDIR(st.st_mode) ? dirs : files;
    if (auto it = other.find(name); it != other.end()) want = it->second;
    const mode_t mode = st.st_mode & 07777;
    if (mode != want) wrong.push_back(absl::StrFormat("%s: %o, expected %o", name, mode, want));
  };
  check(dir);
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir)) {
    check(entry.path());
  }
  return wrong;
}

class RunDirAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // What a shell usually has: the runs' modes are the job's, not this.
    saved_umask_ = ::umask(022);
    root_ = fs::path(::testing::TempDir()) / ("run_dir_access_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { ::umask(saved_umask_); }

  // `trellis ARGS...` to its end, its output in ROOT/NAME.log; fails the
  // test unless it succeeds.
  void Trellis(const std::vector<std::string>& args, const std::string& name) {
    const int status = Wait(StartTrellis(args, root_ / (name + ".log")));
    ASSERT_TRUE(ExitedOk(status)) << Slurp(root_ / (name + ".log"));
  }

  fs::path root_;
  mode_t saved_umask_ = 022;
};

TEST_F(RunDirAccessTest, EverythingARunWritesIsItsOwnersAlone) {
  WriteText(root_ / "job.yaml", config::ResolvedJobYaml(HfJob()));
  for (const std::string command : {"run", "launch"}) {
    const fs::path dir = root_ / command;
    ASSERT_NO_FATAL_FAILURE(
        Trellis({command, (root_ / "job.yaml").string(), "--out", dir.string()}, command));
    for (const char* file :
         {"lock", "job.yaml", "ledger.jsonl", "summary.json", "reference.safetensors",
          "policy.safetensors", "hf/config.json", "hf/model.safetensors", "checkpoints/latest",
          "checkpoints/step_2/weights.safetensors", "checkpoints/step_2/optimizer.safetensors",
          "eval/before.jsonl", "eval/after.jsonl"}) {
      EXPECT_TRUE(fs::exists(dir / file)) << command << ": no " << file;
    }
    EXPECT_THAT(WrongModes(dir, 0700, 0600), IsEmpty()) << command;
  }
  EXPECT_TRUE(fs::exists(root_ / "launch" / "launch" / "secret"));
  EXPECT_TRUE(fs::exists(root_ / "launch" / "workers.tsv"));
}

TEST_F(RunDirAccessTest, GroupAccessLetsTheGroupReadAllButTheSecret) {
  v1::JobConfig job = TinyJob();
  job.mutable_runtime()->set_run_dir_access(v1::RuntimeConfig::GROUP);
  WriteText(root_ / "job.yaml", config::ResolvedJobYaml(job));
  EXPECT_THAT(Slurp(root_ / "job.yaml"), HasSubstr("run_dir_access: group"));
  const fs::path dir = root_ / "launched";
  ASSERT_NO_FATAL_FAILURE(
      Trellis({"launch", (root_ / "job.yaml").string(), "--out", dir.string()}, "launched"));
  EXPECT_TRUE(fs::exists(dir / "checkpoints" / "step_3" / "weights.safetensors"));
  EXPECT_THAT(WrongModes(dir, 0750, 0640, {{"launch/secret", 0600}}), IsEmpty());
}

TEST_F(RunDirAccessTest, ABadAccessIsRefusedNamingTheField) {
  WriteText(root_ / "job.yaml", "runtime: {run_dir_access: world}\n");
  const int status =
      Wait(StartTrellis({"run", (root_ / "job.yaml").string(), "--out", (root_ / "run").string()},
                        root_ / "bad.log"));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << Slurp(root_ / "bad.log");
  EXPECT_THAT(Slurp(root_ / "bad.log"), HasSubstr("runtime.run_dir_access"));
  EXPECT_THAT(Slurp(root_ / "bad.log"), HasSubstr("private, group"));
  EXPECT_FALSE(fs::exists(root_ / "run"));
}

// For an embedded run and a launched one.
TEST_F(RunDirAccessTest, ASecondWriterIsRefusedUntilTheFirstIsKilled) {
  v1::JobConfig job = TinyJob();
  job.mutable_grpo()->set_steps(1000);  // it is stopped and killed long before
  WriteText(root_ / "job.yaml", config::ResolvedJobYaml(job));
  for (const std::string command : {"run", "launch"}) {
    const fs::path dir = root_ / command;
    const pid_t first = StartTrellis(
        {command, (root_ / "job.yaml").string(), "--out", dir.string()}, root_ / "first.log");
    const bool checkpointed =
        WaitFor([&] { return fs::exists(dir / "checkpoints" / "latest"); }, 120);
    // Stopped, it holds the directory for as long as the test needs; so do
    // a launch's processes, which write there but do not hold the lock.
    ::kill(first, SIGSTOP);
    int stopped = 0;
    ASSERT_EQ(::waitpid(first, &stopped, WUNTRACED), first);
    ASSERT_TRUE(WIFSTOPPED(stopped)) << command << ": it ended\n" << Slurp(root_ / "first.log");
    ASSERT_TRUE(checkpointed) << command << ": no checkpoint within 120 s\n"
                              << Slurp(root_ / "first.log");
    for (const auto& [name, pid] : testing_util::Processes(dir)) ::kill(pid, SIGSTOP);
    const std::string lock = Slurp(dir / "lock");
    EXPECT_EQ(lock, absl::StrCat(first, "\n"));
    const std::string ledger = Slurp(dir / "ledger.jsonl");
    const std::vector<std::vector<std::string>> seconds = {
        {"run", "--resume", dir.string()},
        {"launch", "--resume", dir.string()},
        {"run", (root_ / "job.yaml").string(), "--out", dir.string()},
        {"launch", (root_ / "job.yaml").string(), "--out", dir.string()}};
    for (const std::vector<std::string>& args : seconds) {
      const std::string what = absl::StrCat(command, ", then ", args[0], " ", args[1]);
      const int status = Wait(StartTrellis(args, root_ / "second.log"));
      const std::string log = Slurp(root_ / "second.log");
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << what << "\n" << log;
      EXPECT_THAT(log, HasSubstr(absl::StrCat(dir.string(), " is in use: process ", first)))
          << what;
      EXPECT_THAT(log, ::testing::Not(HasSubstr("resuming from"))) << what;
      EXPECT_EQ(Slurp(dir / "lock"), lock) << what;
      // (A launch's scheduler may have been stopped amid a write.)
      if (command == "run") EXPECT_EQ(Slurp(dir / "ledger.jsonl"), ledger) << what;
    }
    ::kill(first, SIGKILL);  // a launch's processes die with it
    const int status = Wait(first);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;

    // Resumed to one step past its newest checkpoint.
    const std::string latest = Slurp(dir / "checkpoints" / "latest");
    int64_t done = 0;
    ASSERT_TRUE(latest.size() > 6 && absl::SimpleAtoi(latest.substr(5, latest.size() - 6), &done))
        << latest;
    job.mutable_grpo()->set_steps(done + 1);
    WriteText(dir / "job.yaml", config::ResolvedJobYaml(job));
    ASSERT_NO_FATAL_FAILURE(Trellis({command, "--resume", dir.string()}, command + "_resumed"));
    EXPECT_THAT(Slurp(root_ / (command + "_resumed.log")), HasSubstr("resuming from"));
    EXPECT_TRUE(fs::exists(dir / "summary.json"));
    EXPECT_THAT(WrongModes(dir, 0700, 0600), IsEmpty()) << command;
  }
}

}  // namespace
}  // namespace trellis
