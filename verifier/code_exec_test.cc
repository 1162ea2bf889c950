// code_exec: candidate programs against test cases, contained in the
// sandbox. Each attack gets its own verdict detail and leaves the host as
// it was. Every case runs under bubblewrap (skipped where it does not work)
// and under the opt-in rlimits fallback.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plugin/confine.h"
#include "plugin/sandbox.h"
#include "verifier/verifier.h"

namespace trellis::verifier {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kTests[] =
    R"([{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4", "output": "6"}])";

absl::StatusOr<std::unique_ptr<Verifier>> Create(v1::VerifierConfig::Sandbox sandbox,
                                                 int deadline_ms = 1500) {
  v1::VerifierConfig c;
  c.set_name("code_exec");
  c.set_sandbox(sandbox);
  c.set_deadline_ms(deadline_ms);
  c.set_cpu_seconds(5);
  c.set_memory_mb(256);
  // Every bubblewrap run leaves a zombie (the namespace's first process)
  // for the host's init, which on some machines reaps it seconds later; the
  // sandbox user's zombies count toward this limit, so it leaves room for a
  // whole run of this test's cases.
  c.set_max_processes(64);
  c.set_timeout_reward(-0.5f);
  c.set_reward_wrong(-1.0f);
  VerifierRegistry registry;
  EXPECT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  return registry.Create(c);
}

v1::VerifyResult Score(const Verifier& v, const std::string& program,
                       const std::string& tests = kTests) {
  v1::VerifyItem item;
  item.set_response(program);
  item.set_answer(tests);
  return v.Verify(item);
}

// One test case: no input, `output` expected.
std::string Expect(const std::string& output) {
  return absl::StrCat(R"([{"input": "", "output": ")", output, R"("}])");
}

// Host processes whose command line contains `needle`.
int CountProcesses(const std::string& needle) {
  int n = 0;
  DIR* d = opendir("/proc");
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(absl::StrCat("/proc/", e->d_name, "/cmdline"));
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (absl::StrContains(cmd, needle)) ++n;
  }
  if (d) closedir(d);
  return n;
}

// The same, after giving a killed sandbox's pid namespace the moment the
// kernel takes to tear it down.
int Strays(const std::string& needle) {
  int n = CountProcesses(needle);
  for (int i = 0; i < 100 && n > 0; ++i) {
    usleep(20000);
    n = CountProcesses(needle);
  }
  return n;
}

// A sleep that only this test process starts: "sleep 30.<pid>".
std::string UniqueSleep() { return absl::StrCat("30.", getpid()); }

// `program` with $SLEEP replaced by UniqueSleep().
std::string WithSleep(absl::string_view program) {
  return absl::StrReplaceAll(program, {{"$SLEEP", UniqueSleep()}});
}

class CodeExecTest : public ::testing::TestWithParam<v1::VerifierConfig::Sandbox> {
 protected:
  void SetUp() override {
    if (GetParam() == v1::VerifierConfig::BWRAP && !plugin::BwrapWorks()) {
      GTEST_SKIP() << "bubblewrap does not work here: " << plugin::BwrapStatus();
    }
  }
  std::unique_ptr<Verifier> Make(int deadline_ms = 1500) {
    absl::StatusOr<std::unique_ptr<Verifier>> v = Create(GetParam(), deadline_ms);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? std::move(*v) : nullptr;
  }
  bool Bwrap() const { return GetParam() == v1::VerifierConfig::BWRAP; }
};

TEST_P(CodeExecTest, CorrectWrongAndRuntimeError) {
  auto v = Make();
  v1::VerifyResult r =
      Score(*v, "Here:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\n");
  EXPECT_EQ(r.verdict(), v1::CORRECT) << r.detail();
  r = Score(*v, "a, b = map(int, input().split())\nprint(a * b)\n");
  EXPECT_EQ(r.verdict(), v1::WRONG);
  EXPECT_THAT(r.detail(), StartsWith("wrong_output: test 1/2"));
  r = Score(*v, "raise ValueError('nope')\n");
  EXPECT_EQ(r.verdict(), v1::WRONG);
  EXPECT_THAT(r.detail(), StartsWith("runtime_error: test 1/2"));
  EXPECT_THAT(r.detail(), HasSubstr("nope"));
  r = Score(*v, "print(1)", "not json");
  EXPECT_EQ(r.verdict(), v1::ERROR);
}

TEST_P(CodeExecTest, InfiniteLoopIsKilledAtTheDeadline) {
  auto v = Make(500);
  const absl::Time start = absl::Now();
  v1::VerifyResult r = Score(*v, WithSleep(R"(import os
if os.fork() == 0:
    os.execv("/usr/bin/sleep", ["sleep", "$SLEEP"])
while True: pass
)"));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(r.verdict(), v1::TIMEOUT) << r.detail();
  EXPECT_FLOAT_EQ(r.reward(), -0.5f);
  EXPECT_THAT(r.detail(), StartsWith("timeout"));
  std::cout << "[ measured ] infinite loop contained after " << took << "\n";
  EXPECT_EQ(Strays(UniqueSleep()), 0);
}

TEST_P(CodeExecTest, ForkBombHitsTheProcessLimit) {
  auto v = Make(3000);
  v1::VerifyResult r = Score(*v, "import os\nwhile True:\n    os.fork()\n");
  EXPECT_EQ(r.verdict(), v1::WRONG) << r.detail();
  EXPECT_THAT(r.detail(), StartsWith("process_limit")) << r.detail();
  EXPECT_EQ(Strays("candidate.py"), 0);
}

TEST_P(CodeExecTest, MemoryHogHitsTheMemoryLimit) {
  auto v = Make();
  v1::VerifyResult r = Score(*v, "x = bytearray(2 * 1024**3)\nprint(len(x))\n");
  EXPECT_EQ(r.verdict(), v1::WRONG) << r.detail();
  EXPECT_THAT(r.detail(), StartsWith("memory_limit")) << r.detail();
}

TEST_P(CodeExecTest, NetworkIsBlocked) {
  auto v = Make();
  v1::VerifyResult r = Score(*v, R"(import socket
s = socket.create_connection(("1.1.1.1", 80), timeout=1)
print("connected")
)");
  EXPECT_EQ(r.verdict(), v1::WRONG) << r.detail();
  EXPECT_THAT(r.detail(), StartsWith("network_blocked")) << r.detail();
}

TEST_P(CodeExecTest, WritingOutsideTheWorkingDirectoryIsDenied) {
  const std::string outside = "/usr/trellis_sandbox_escape_test.txt";
  unlink(outside.c_str());
  auto v = Make();
  v1::VerifyResult r = Score(*v, absl::StrCat("open('", outside, "', 'w').write('pwned')\n"));
  EXPECT_EQ(r.verdict(), v1::WRONG) << r.detail();
  EXPECT_THAT(r.detail(), StartsWith("write_denied")) << r.detail();
  EXPECT_NE(access(outside.c_str(), F_OK), 0) << outside << " was created";
  // Its own working directory is writable.
  r = Score(*v, R"(open('scratch.txt', 'w').write('5\n')
input()
print(open('scratch.txt').read().strip())
)",
            R"([{"input": "x\n", "output": "5"}])");
  EXPECT_EQ(r.verdict(), v1::CORRECT) << r.detail();
}

// The verifier holds a file open without close-on-exec (as a careless
// library would): the program sees no descriptor but 0, 1 and 2, so it can
// neither read the file nor write into it.
TEST_P(CodeExecTest, InheritsNoDescriptors) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/held_open_", getpid());
  { std::ofstream(path) << "SECRET\n"; }
  const int held = open(path.c_str(), O_RDWR | O_APPEND);  // no O_CLOEXEC, on purpose
  ASSERT_GE(held, 0);
  auto v = Make();
  v1::VerifyResult r = Score(*v, R"(import os
found = []
for fd in range(3, 1024):
    try:
        os.fstat(fd)
    except OSError:
        continue
    found.append(fd)
    try:
        os.write(fd, b"pwned\n")
    except OSError:
        pass
print(found)
)",
                             Expect("[]"));
  EXPECT_EQ(r.verdict(), v1::CORRECT) << r.detail();
  close(held);
  std::ifstream f(path);
  std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "SECRET\n");
  unlink(path.c_str());
}

// A grandchild that tries to leave the process group (setsid is refused by
// the filter; under bwrap the pid namespace holds it anyway) and sleeps past
// the deadline is dead once the verdict is in.
TEST_P(CodeExecTest, SetsidGrandchildDiesAtTheDeadline) {
  auto v = Make(800);
  v1::VerifyResult r = Score(*v, WithSleep(R"(import os, time
if os.fork() == 0:
    try:
        os.setsid()
    except OSError:
        pass
    os.execv("/usr/bin/sleep", ["sleep", "$SLEEP"])
time.sleep(30)
)"),
                             Expect(""));
  EXPECT_EQ(r.verdict(), v1::TIMEOUT) << r.detail();
  EXPECT_EQ(Strays(UniqueSleep()), 0) << "a grandchild outlived the deadline";
}

// The same grandchild left behind by a program that exits at once.
TEST_P(CodeExecTest, SetsidGrandchildDiesWhenTheProgramExits) {
  auto v = Make(5000);
  v1::VerifyResult r = Score(*v, WithSleep(R"(import os
if os.fork() == 0:
    try:
        os.setsid()
    except OSError:
        pass
    if os.fork() == 0:
        os.execv("/usr/bin/sleep", ["sleep", "$SLEEP"])
    os._exit(0)
os.wait()
print("done")
)"),
                             Expect("done"));
  EXPECT_EQ(r.verdict(), v1::CORRECT) << r.detail();
  EXPECT_EQ(Strays(UniqueSleep()), 0) << "a grandchild outlived the program";
}

// /tmp is private: a file written there is gone for the next program and
// never reaches the host's /tmp. TMPDIR is writable in both modes.
TEST_P(CodeExecTest, TemporaryFilesArePrivateAndVanish) {
  const std::string name = absl::StrCat("/tmp/trellis_private_", getpid(), ".txt");
  auto v = Make();
  v1::VerifyResult r = Score(*v,
                             absl::StrCat(R"(import tempfile
try:
    open(")",
                                          name, R"(", "w").write("left behind")
except OSError:
    pass
with tempfile.NamedTemporaryFile() as f:
    f.write(b"x")
print("wrote")
)"),
                             Expect("wrote"));
  EXPECT_EQ(r.verdict(), v1::CORRECT) << r.detail();
  EXPECT_NE(access(name.c_str(), F_OK), 0) << name << " reached the host";
  r = Score(*v,
            absl::StrCat(R"(import os
print(os.path.exists(")",
                         name, R"("))
)"),
            Expect("False"));
  EXPECT_EQ(r.verdict(), v1::CORRECT) << r.detail();
}

// Host files outside the system directories cannot be read (bwrap: not
// there; rlimits: Landlock, where the kernel has it).
TEST_P(CodeExecTest, HostFilesAreNotReadable) {
  if (!Bwrap() && plugin::LandlockAbi() == 0) GTEST_SKIP() << "no Landlock in this kernel";
  const std::string secret = absl::StrCat("/tmp/trellis_secret_", getpid(), ".txt");
  { std::ofstream(secret) << "SECRET\n"; }
  chmod(secret.c_str(), 0644);
  auto v = Make();
  v1::VerifyResult r = Score(*v, absl::StrCat(R"(for path in [")", secret, R"(", "/etc/passwd"]:
    try:
        print(open(path).read())
    except OSError:
        print("denied")
)"),
                             Expect("denied\\ndenied"));
  EXPECT_EQ(r.verdict(), v1::CORRECT) << r.detail();
  unlink(secret.c_str());
}

// System calls the filter refuses fail with EPERM instead of running.
TEST_P(CodeExecTest, SeccompRefusesDangerousSyscalls) {
  auto v = Make();
  v1::VerifyResult r = Score(*v, R"(import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(libc.ptrace(0, 0, 0, 0), ctypes.get_errno())
print(libc.unshare(0x10000000), ctypes.get_errno())
print(libc.setns(0, 0), ctypes.get_errno())
)",
                             Expect("-1 1\\n-1 1\\n-1 1"));
  EXPECT_EQ(r.verdict(), v1::CORRECT) << r.detail();
  r = Score(*v, "import os\nos.setpgid(0, 0)\n");
  EXPECT_EQ(r.verdict(), v1::WRONG) << r.detail();
  EXPECT_THAT(r.detail(), StartsWith("syscall_denied")) << r.detail();
}

INSTANTIATE_TEST_SUITE_P(Sandboxes, CodeExecTest,
                         ::testing::Values(v1::VerifierConfig::BWRAP, v1::VerifierConfig::RLIMITS),
                         [](const auto& info) {
                           return info.param == v1::VerifierConfig::BWRAP ? "bwrap" : "rlimits";
                         });

TEST(CodeExecChoice, RlimitsIsAnnouncedOnStderr) {
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Verifier>> v = Create(v1::VerifierConfig::RLIMITS);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(err, HasSubstr("sandbox \"rlimits\" (opt-in, weaker than bubblewrap)"));
}

TEST(CodeExecChoice, WithoutBwrapAutoAndBwrapRefuseAndNameTheOptIn) {
  std::cout << "[ info ] bubblewrap works here: " << (plugin::BwrapWorks() ? "yes" : "no") << "\n";
  for (auto sandbox : {v1::VerifierConfig::AUTO, v1::VerifierConfig::BWRAP}) {
    absl::StatusOr<std::unique_ptr<Verifier>> v = Create(sandbox);
    if (plugin::BwrapWorks()) {
      EXPECT_TRUE(v.ok()) << v.status();
      continue;
    }
    EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(v.status().message(), HasSubstr("set verifier.sandbox: rlimits"));
  }
}

}  // namespace
}  // namespace trellis::verifier
