// The subprocess verifier: JSON-lines plugins, deadlines that kill, restarts
// and malformed output.

#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verifier/verifier.h"

namespace trellis::verifier {
namespace {

using ::testing::HasSubstr;

// Writes a Python plugin into the test's temp dir; returns its path.
std::string Plugin(const std::string& name, const std::string& body) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name, ".py");
  std::ofstream(path) << "import json, sys, os, time\n" << body;
  return path;
}

// Echoes the verdict asked for by the response: "correct", "hang", ...
const char* kEcho = R"(
for line in sys.stdin:
    req = json.loads(line)
    r = req["response"]
    if r == "hang": time.sleep(3600)
    if r == "die": os._exit(3)
    if r == "two": print(json.dumps({"id": req["id"], "reward": 1, "verdict": "correct"}))
    if r == "garbage": print("not json at all", flush=True); continue
    if r == "nan": print('{"reward": NaN, "verdict": "correct"}', flush=True); continue
    if r == "big": print('{"reward": 1e300, "verdict": "correct"}', flush=True); continue
    if r == "noreward": print(json.dumps({"verdict": "correct"}), flush=True); continue
    if r == "strreward": print(json.dumps({"reward": "1", "verdict": "correct"}), flush=True); continue
    if r == "badverdict": print(json.dumps({"reward": 1, "verdict": "maybe"}), flush=True); continue
    if r == "meta": print(json.dumps({"reward": 0.25, "verdict": "correct", "detail": json.dumps(req.get("metadata"))}), flush=True); continue
    ok = r == req["answer"]
    print(json.dumps({"id": req["id"], "reward": 1.0 if ok else 0.0, "verdict": "correct" if ok else "wrong",
                      "detail": "pid %d" % os.getpid()}), flush=True)
)";

// The default deadline is far above a plugin's start-up time even on a
// loaded machine; tests about deadlines pass their own.
std::unique_ptr<Verifier> Make(const std::vector<std::string>& command, int workers = 1,
                               int deadline_ms = 10000, int retries = 0) {
  v1::VerifierConfig c;
  c.set_name("subprocess");
  for (const std::string& a : command) c.add_command(a);
  c.set_workers(workers);
  c.set_deadline_ms(deadline_ms);
  c.set_timeout_reward(-0.25f);
  c.set_reward_wrong(-1.0f);
  c.set_retries(retries);
  // These tests watch the plugin processes answer; the pool's cache would
  // answer repeated items without them (pool_test.cc covers the cache).
  c.set_cache_entries(0);
  VerifierRegistry registry;
  EXPECT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  absl::StatusOr<std::unique_ptr<Verifier>> v = registry.Create(c);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::move(*v) : nullptr;
}

v1::VerifyItem Item(const std::string& response, const std::string& answer = "a") {
  v1::VerifyItem item;
  item.set_prompt("p");
  item.set_response(response);
  item.set_answer(answer);
  return item;
}

TEST(Subprocess, AnswersAndKeepsWorkersAlive) {
  auto v = Make({"python3", Plugin("echo1", kEcho)});
  v1::VerifyResult a = v->Verify(Item("a"));
  EXPECT_EQ(a.verdict(), v1::CORRECT) << a.detail();
  EXPECT_FLOAT_EQ(a.reward(), 1.0f);
  v1::VerifyResult b = v->Verify(Item("b"));
  EXPECT_EQ(b.verdict(), v1::WRONG);
  EXPECT_EQ(a.detail(), b.detail());  // same pid: the worker is long-lived
  v1::VerifyItem meta = Item("meta");
  meta.set_metadata_json(R"({"k": 7})");
  EXPECT_THAT(v->Verify(meta).detail(), HasSubstr("{\"k\": 7}"));
}

TEST(Subprocess, NeverAnsweringPluginIsKilledAtItsDeadline) {
  // A shell plugin that reads a line and then sleeps forever (a child
  // process, so the kill must take the whole process group).
  auto v = Make({"while read line; do sleep 1000; done"}, 1, 300);
  const absl::Time start = absl::Now();
  v1::VerifyResult r = v->Verify(Item("x"));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(r.verdict(), v1::TIMEOUT);
  EXPECT_FLOAT_EQ(r.reward(), -0.25f);
  EXPECT_THAT(r.detail(), HasSubstr("timeout"));
  EXPECT_LT(took, absl::Milliseconds(300) + absl::Seconds(1));
  std::cout << "[ measured ] never-answering plugin call returned after " << took << "\n";

  // The next call works on a fresh worker (which times out the same way).
  auto echo = Make({"python3", Plugin("echo2", kEcho)}, 1, 5000);
  EXPECT_EQ(echo->Verify(Item("hang")).verdict(), v1::TIMEOUT);
  v1::VerifyResult after = echo->Verify(Item("a"));
  EXPECT_EQ(after.verdict(), v1::CORRECT) << after.detail();
}

TEST(Subprocess, DeadWorkerGivesErrorWithExitStatusOrIsRetried) {
  auto v = Make({"python3", Plugin("echo3", kEcho)});
  v1::VerifyResult r = v->Verify(Item("die"));
  EXPECT_EQ(r.verdict(), v1::ERROR);
  EXPECT_THAT(r.detail(), HasSubstr("exit status 3"));
  EXPECT_EQ(v->Verify(Item("a")).verdict(), v1::CORRECT);  // restarted

  // With retries the item runs again on a fresh worker (and dies again).
  auto retry = Make({"python3", Plugin("echo4", kEcho)}, 1, 10000, 1);
  v1::VerifyResult died = retry->Verify(Item("die"));
  EXPECT_EQ(died.verdict(), v1::ERROR);
  EXPECT_EQ(died.retries(), 1);
  EXPECT_EQ(retry->Verify(Item("a")).verdict(), v1::CORRECT);
}

TEST(Subprocess, MalformedOutputIsAnErrorWithAReason) {
  auto v = Make({"python3", Plugin("echo5", kEcho)});
  const std::pair<const char*, const char*> cases[] = {
      {"garbage", "not JSON"},
      {"nan", "not JSON"},
      {"big", "finite"},
      {"noreward", "missing field \"reward\""},
      {"strreward", "\"reward\" must be a number, found string"},
      {"badverdict", "\"verdict\" must be correct, wrong"},
  };
  for (const auto& [response, reason] : cases) {
    v1::VerifyResult r = v->Verify(Item(response));
    EXPECT_EQ(r.verdict(), v1::ERROR) << response;
    EXPECT_FLOAT_EQ(r.reward(), -1.0f) << response;
    EXPECT_THAT(r.detail(), HasSubstr(reason)) << response;
    EXPECT_EQ(v->Verify(Item("a")).verdict(), v1::CORRECT) << "after " << response;
  }
  // Two lines for one request: the extra line is noticed (at once, or before
  // the next request) and the worker restarted, so answers stay in step.
  v1::VerifyResult two = v->Verify(Item("two"));
  if (two.verdict() == v1::ERROR) EXPECT_THAT(two.detail(), HasSubstr("more than one line"));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(v->Verify(Item("a")).verdict(), v1::CORRECT);
}

TEST(Subprocess, BatchUsesEveryWorkerConcurrently) {
  // Each answer takes 200 ms; 8 items on 4 workers take ~2 rounds, not 8.
  auto v = Make({"python3", Plugin("slow", R"(
for line in sys.stdin:
    time.sleep(0.2)
    print(json.dumps({"reward": 1, "verdict": "correct", "detail": str(os.getpid())}), flush=True)
)")}, 4, 3000);
  google::protobuf::RepeatedPtrField<v1::VerifyItem> items;
  for (int i = 0; i < 8; ++i) *items.Add() = Item("a");
  std::vector<v1::VerifyResult> results = v->VerifyBatch(items);  // warm-up: starts workers
  const absl::Time start = absl::Now();
  results = v->VerifyBatch(items);
  const absl::Duration took = absl::Now() - start;
  ASSERT_EQ(results.size(), 8u);
  std::set<std::string> pids;
  for (const auto& r : results) {
    EXPECT_EQ(r.verdict(), v1::CORRECT) << r.detail();
    pids.insert(r.detail());
  }
  EXPECT_GE(pids.size(), 2u);
  std::cout << "[ measured ] 8 items x 200 ms on 4 workers: " << took << " (" << pids.size()
            << " workers answered)\n";
}

TEST(Subprocess, ConfigErrorsAndMissingProgram) {
  VerifierRegistry registry;
  ASSERT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  v1::VerifierConfig c;
  c.set_name("subprocess");
  absl::Status s = registry.Create(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("verifier.command"));
  c.add_command("x");
  c.set_workers(0);
  EXPECT_THAT(registry.Create(c).status().message(), HasSubstr("verifier.workers"));

  auto v = Make({"/nonexistent/plugin", "arg"});
  v1::VerifyResult r = v->Verify(Item("a"));
  EXPECT_EQ(r.verdict(), v1::ERROR);
  EXPECT_THAT(r.detail(), HasSubstr("cannot start \"/nonexistent/plugin\""));
}

}  // namespace
}  // namespace trellis::verifier
