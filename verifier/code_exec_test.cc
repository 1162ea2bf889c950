// code_exec: candidate programs against test cases, contained in the
// sandbox. Each attack gets its own verdict detail and leaves the host as
// it was.

#include <dirent.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verifier/internal/sandbox.h"
#include "verifier/verifier.h"

namespace trellis::verifier {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kTests[] = R"([{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4", "output": "6"}])";

std::unique_ptr<Verifier> Make(int deadline_ms = 1500) {
  v1::VerifierConfig c;
  c.set_name("code_exec");
  c.set_deadline_ms(deadline_ms);
  c.set_cpu_seconds(5);
  c.set_memory_mb(256);
  c.set_max_processes(16);
  c.set_timeout_reward(-0.5f);
  c.set_reward_wrong(-1.0f);
  VerifierRegistry registry;
  EXPECT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  absl::StatusOr<std::unique_ptr<Verifier>> v = registry.Create(c);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::move(*v) : nullptr;
}

v1::VerifyResult Score(const Verifier& v, const std::string& program,
                     const std::string& tests = kTests) {
  v1::VerifyItem item;
  item.set_response(program);
  item.set_answer(tests);
  return v.Verify(item);
}

// Processes on the host still running a candidate program. A killed
// sandbox's namespace is torn down by the kernel a moment later: wait for it.
int CountCandidates();
int StrayCandidates() {
  int n = CountCandidates();
  for (int i = 0; i < 100 && n > 0; ++i) {
    usleep(20000);
    n = CountCandidates();
  }
  return n;
}
int CountCandidates() {
  int n = 0;
  DIR* d = opendir("/proc");
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(absl::StrCat("/proc/", e->d_name, "/cmdline"));
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (absl::StrContains(cmd, "candidate.py")) ++n;
  }
  if (d) closedir(d);
  return n;
}

bool Namespaces() { return internal::BwrapWorks(); }

TEST(CodeExec, CorrectWrongAndRuntimeError) {
  std::cout << "[ info ] bubblewrap works here: " << (Namespaces() ? "yes" : "no") << "\n";
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

TEST(CodeExec, InfiniteLoopIsKilledAtTheDeadline) {
  auto v = Make(500);
  const absl::Time start = absl::Now();
  v1::VerifyResult r = Score(*v, "import os\nos.fork()\nwhile True: pass\n");
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(r.verdict(), v1::TIMEOUT) << r.detail();
  EXPECT_FLOAT_EQ(r.reward(), -0.5f);
  EXPECT_THAT(r.detail(), StartsWith("timeout"));
  EXPECT_LT(took, absl::Milliseconds(1500));
  std::cout << "[ measured ] infinite loop contained after " << took << "\n";
  EXPECT_EQ(StrayCandidates(), 0);
}

TEST(CodeExec, ForkBombHitsTheProcessLimit) {
  auto v = Make(3000);
  v1::VerifyResult r = Score(*v, "import os\nwhile True:\n    os.fork()\n");
  EXPECT_EQ(r.verdict(), v1::WRONG) << r.detail();
  EXPECT_THAT(r.detail(), StartsWith("process_limit")) << r.detail();
  EXPECT_EQ(StrayCandidates(), 0);
}

TEST(CodeExec, MemoryHogHitsTheMemoryLimit) {
  auto v = Make();
  v1::VerifyResult r = Score(*v, "x = bytearray(2 * 1024**3)\nprint(len(x))\n");
  EXPECT_EQ(r.verdict(), v1::WRONG) << r.detail();
  EXPECT_THAT(r.detail(), StartsWith("memory_limit")) << r.detail();
}

TEST(CodeExec, NetworkIsBlocked) {
  auto v = Make();
  v1::VerifyResult r = Score(*v, R"(import socket
s = socket.create_connection(("1.1.1.1", 80), timeout=1)
print("connected")
)");
  EXPECT_EQ(r.verdict(), v1::WRONG) << r.detail();
  EXPECT_THAT(r.detail(), StartsWith("network_blocked")) << r.detail();
}

TEST(CodeExec, WritingOutsideTheWorkingDirectoryIsDenied) {
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
)", R"([{"input": "x\n", "output": "5"}])");
  EXPECT_EQ(r.verdict(), v1::CORRECT) << r.detail();
}

TEST(CodeExec, BwrapRequiredButMissingIsAConfigError) {
  if (Namespaces()) GTEST_SKIP() << "bubblewrap works here; nothing to refuse";
  v1::VerifierConfig c;
  c.set_name("code_exec");
  c.set_sandbox(v1::VerifierConfig::BWRAP);
  VerifierRegistry registry;
  ASSERT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  EXPECT_EQ(registry.Create(c).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace trellis::verifier
