// End-to-end: the verifier pool in a training run. A plugin that hangs on
// some items, verifier.timeout_policy "drop": the run still trains, and
// the ledger records the timeouts and drops per verifier.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "run/embedded_job.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

using testing_util::Slurp;
using testing_util::TinyJob;
using testing_util::WriteText;

// Scores like "numeric" (first integer of the response against the
// answer), but sleeps far past the deadline on every item whose prompt and
// response hash to 0 mod 5: a verifier that hangs on some items.
constexpr char kHangingPlugin[] = R"(import hashlib, json, re, sys, time
for line in sys.stdin:
    req = json.loads(line)
    key = (req["prompt"] + "|" + req["response"]).encode()
    if int(hashlib.md5(key).hexdigest(), 16) % 5 == 0:
        time.sleep(60)
    m = re.search(r"-?\d+", req["response"])
    if m is None:
        out = {"reward": 0, "verdict": "unparseable"}
    elif m.group(0) == req["answer"].strip():
        out = {"reward": 1, "verdict": "correct"}
    else:
        out = {"reward": 0, "verdict": "wrong"}
    out["id"] = req["id"]
    print(json.dumps(out), flush=True)
)";

std::vector<nlohmann::json> Records(const fs::path& dir, const std::string& type) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir / "ledger.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json r = nlohmann::json::parse(line);
    if (r["type"] == type) out.push_back(std::move(r));
  }
  return out;
}

// Runs `job` into a fresh directory; its progress output into *printed
// when given.
fs::path RunJob(const std::string& name, const v1::JobConfig& job,
                std::string* printed = nullptr) {
  const fs::path dir = fs::path(testing::TempDir()) / name;
  fs::remove_all(dir);
  std::ostringstream progress;
  absl::Status status = run::RunEmbeddedJob(job, dir.string(), progress);
  EXPECT_TRUE(status.ok()) << status << "\n" << progress.str();
  if (printed != nullptr) *printed = progress.str();
  return dir;
}

TEST(VerifierPolicyTest, DropPolicyTrainsAndRecordsTimeoutsAndDrops) {
  const fs::path plugin = fs::path(testing::TempDir()) / "hanging_plugin.py";
  WriteText(plugin, kHangingPlugin);
  v1::JobConfig job = TinyJob();
  job.mutable_eval()->set_num_prompts(4);
  v1::VerifierConfig* v = job.mutable_verifier();
  v->set_name("subprocess");
  v->add_command("python3");
  v->add_command(plugin.string());
  v->set_workers(4);
  // Well above a fresh python3's start-up on a loaded machine: a killed
  // worker's successor must answer in time.
  v->set_deadline_ms(1500);
  v->set_timeout_reward(-1);
  v->set_timeout_policy(v1::VerifierConfig::DROP);
  v->set_version("hang1");
  v->set_breaker_failures(0);  // only timeouts here, no pauses

  const fs::path dir = RunJob("verifier_drop", job);
  const auto summary = nlohmann::json::parse(Slurp(dir / "summary.json"));
  EXPECT_EQ(summary["steps"].get<int>(), 3);

  const std::vector<nlohmann::json> steps = Records(dir, "step");
  ASSERT_EQ(steps.size(), 3u);
  int64_t dropped = 0, trained_tokens = 0;
  for (const auto& s : steps) {
    dropped += s["samples_dropped"].get<int64_t>();
    trained_tokens += s["trained_tokens"].get<int64_t>();
    EXPECT_EQ(s["samples_timeout"].get<int64_t>(), 0);  // dropped, not trained on
    // A dropped sample's -1 never reaches the mean.
    EXPECT_GE(s["mean_reward"].get<double>(), 0.0);
  }
  EXPECT_GT(dropped, 0) << "no item timed out: the plugin's hash picked none";
  EXPECT_GT(trained_tokens, 0) << "nothing trained";
  EXPECT_EQ(summary["samples"]["dropped"].get<int64_t>(), dropped);

  // Per-verifier records: one per training step and per eval batch.
  const std::vector<nlohmann::json> verifier = Records(dir, "verifier");
  ASSERT_FALSE(verifier.empty());
  int64_t record_drops = 0, timeouts = 0;
  for (const auto& r : verifier) {
    EXPECT_EQ(r["verifier"], "subprocess@hang1");
    record_drops += r["dropped"].get<int64_t>();
    timeouts += r["timeouts"].get<int64_t>();
    EXPECT_GE(r["latency_p99_seconds"].get<double>(), r["latency_p50_seconds"].get<double>());
  }
  EXPECT_EQ(record_drops, dropped);
  EXPECT_GT(timeouts, 0);
  const auto& totals = summary["verifiers"]["subprocess@hang1"];
  EXPECT_EQ(totals["dropped"].get<int64_t>(), dropped);
  EXPECT_EQ(totals["timeouts"].get<int64_t>(), timeouts);
  // A hung item waits out its deadline.
  EXPECT_GE(totals["latency_p99_seconds_max"].get<double>(), 1.5);
}

TEST(VerifierPolicyTest, RewardPolicyTrainsTimeoutsWithTheirReward) {
  const fs::path plugin = fs::path(testing::TempDir()) / "hanging_plugin_r.py";
  WriteText(plugin, kHangingPlugin);
  v1::JobConfig job = TinyJob();
  job.mutable_eval()->set_num_prompts(4);
  v1::VerifierConfig* v = job.mutable_verifier();
  v->set_name("subprocess");
  v->add_command("python3");
  v->add_command(plugin.string());
  v->set_workers(4);
  v->set_deadline_ms(1500);
  v->set_breaker_failures(0);

  const fs::path dir = RunJob("verifier_reward", job);
  int64_t timeout_verdicts = 0;
  for (const auto& r : Records(dir, "verifier")) {
    if (r["step"].get<int64_t>() >= 0 && r["step"].get<int64_t>() < 3) {
      timeout_verdicts += r["timeouts"].get<int64_t>();
    }
    EXPECT_EQ(r["dropped"].get<int64_t>(), 0);
  }
  EXPECT_GT(timeout_verdicts, 0);
  int64_t dropped = 0;
  for (const auto& s : Records(dir, "step")) dropped += s["samples_dropped"].get<int64_t>();
  EXPECT_EQ(dropped, 0);
}

// The built-in verifier is pooled too: every step records its cache.
TEST(VerifierPolicyTest, BuiltinVerifierRecordsStatsEveryStep) {
  const fs::path dir = RunJob("verifier_builtin", TinyJob());
  std::set<int64_t> steps;
  int64_t items = 0;
  for (const auto& r : Records(dir, "verifier")) {
    EXPECT_EQ(r["verifier"], "numeric");
    EXPECT_EQ(r["timeouts"].get<int64_t>(), 0);
    EXPECT_EQ(r["breaker_openings"].get<int64_t>(), 0);
    steps.insert(r["step"].get<int64_t>());
    items += r["items"].get<int64_t>();
  }
  EXPECT_TRUE(steps.count(0) && steps.count(1) && steps.count(2));
  const auto summary = nlohmann::json::parse(Slurp(dir / "summary.json"));
  EXPECT_EQ(summary["verifiers"]["numeric"]["items"].get<int64_t>(), items);
}

// A verifier that is dead from the start: every step's samples are counted
// as samples_error (not as the zero-variance groups their equal rewards
// make), the breaker opens once after breaker_failures failed calls, stderr
// gets one line per state change, and the evaluations, whose every item
// keeps failing after eval.verify_retries, say they are incomplete and
// have no accuracy, in the ledger and on every line that shows one.
TEST(VerifierPolicyTest, DeadVerifierIsCountedAndLeavesTheEvaluationIncomplete) {
  v1::JobConfig job = TinyJob();
  job.mutable_eval()->set_num_prompts(4);
  v1::VerifierConfig* v = job.mutable_verifier();
  v->set_name("subprocess");
  v->add_command("exit 3");  // every worker dies at once
  v->set_breaker_failures(4);
  v->set_breaker_pause_ms(50);
  v->set_cache_entries(0);

  std::ostringstream err;
  std::streambuf* old = std::cerr.rdbuf(err.rdbuf());
  std::string progress;
  const fs::path dir = RunJob("verifier_dead", job, &progress);
  std::cerr.rdbuf(old);

  const auto summary = nlohmann::json::parse(Slurp(dir / "summary.json"));
  const auto& samples = summary["samples"];
  EXPECT_GT(samples["generated"].get<int64_t>(), 0);
  EXPECT_EQ(samples["error"].get<int64_t>(), samples["generated"].get<int64_t>());
  EXPECT_EQ(samples["zero_variance"].get<int64_t>(), 0);

  for (const char* label : {"before", "after"}) {
    const auto& eval = summary["eval"][label];
    EXPECT_FALSE(eval["complete"].get<bool>()) << label;
    EXPECT_EQ(eval["unscored"].get<int64_t>(), 4) << label;
    EXPECT_EQ(eval["verify_retries"].get<int64_t>(), 8) << label;  // 2 retries of 4 items
    EXPECT_TRUE(eval["accuracy"].is_null()) << label;
  }
  EXPECT_NE(progress.find("eval after   INCOMPLETE: 4 of 4 held-out prompts not scored"),
            std::string::npos)
      << progress;
  EXPECT_NE(progress.find("held-out accuracy (greedy): before INCOMPLETE (4 of 4 not scored)  "
                          "after INCOMPLETE (4 of 4 not scored)\n"),
            std::string::npos)
      << progress;
  EXPECT_EQ(progress.find("accuracy 0."), std::string::npos) << progress;

  const auto& totals = summary["verifiers"]["subprocess"];
  // Every worker died: each error is a failed call.
  EXPECT_GT(totals["errors_by_reason"]["call_failed"].get<int64_t>(), 0);
  EXPECT_EQ(totals["errors_by_reason"]["call_failed"].get<int64_t>(),
            totals["errors"].get<int64_t>());
  EXPECT_GT(totals["breaker_rejected"].get<int64_t>(), 0);

  // One line per change of state, however many calls failed: failing,
  // open, then for each trial after a pause half-open and open again.
  std::vector<std::string> lines;
  std::istringstream in(err.str());
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("verifier subprocess: ", 0) == 0) lines.push_back(line);
  }
  ASSERT_GE(lines.size(), 2u) << err.str();
  EXPECT_EQ(lines.size() % 2, 0u) << err.str();
  EXPECT_NE(lines[0].find("failing: "), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("circuit open: subprocess failed 4 consecutive calls"), std::string::npos)
      << lines[1];
  for (size_t i = 2; i < lines.size(); i += 2) {
    EXPECT_NE(lines[i].find("half-open: "), std::string::npos) << lines[i];
    EXPECT_NE(lines[i + 1].find("trial call failed: circuit open"), std::string::npos)
        << lines[i + 1];
  }
}

}  // namespace
}  // namespace trellis
