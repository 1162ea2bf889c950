#include "verifier/pool.h"

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "env/testing/fake_env.h"
#include "gtest/gtest.h"
#include "verifier/verifier.h"

namespace trellis::verifier {
namespace {

// Fails, times out or throws on command: the response "error" gets ERROR,
// "timeout" TIMEOUT, "retried" CORRECT after 2 retries, "named" CORRECT
// from "fake-service@7", "throw" throws;
// otherwise CORRECT when the response equals the answer, else WRONG.
class FakeVerifier : public Verifier {
 public:
  FakeVerifier(std::atomic<int>* calls, bool batches = false, int concurrency = 1)
      : calls_(calls), batches_(batches), concurrency_(concurrency) {}

  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    ++*calls_;
    v1::VerifyResult r;
    const std::string& got = item.response();
    if (got == "throw") throw std::runtime_error("boom");
    if (got == "error") {
      r.set_verdict(v1::ERROR);
    } else if (got == "timeout") {
      r.set_verdict(v1::TIMEOUT);
      r.set_reward(-1);
    } else if (got == "retried") {
      r.set_verdict(v1::CORRECT);
      r.set_retries(2);
    } else if (got == "named") {
      r.set_verdict(v1::CORRECT);
      r.set_verifier("fake-service@7");
    } else {
      r.set_verdict(got == item.answer() ? v1::CORRECT : v1::WRONG);
      r.set_reward(got == item.answer() ? 1 : 0);
    }
    r.set_detail("fake");
    return r;
  }

  std::vector<v1::VerifyResult> VerifyBatch(
      const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items) const override {
    if (batches_) ++batch_calls;
    return Verifier::VerifyBatch(items);
  }

  bool PrefersBatches() const override { return batches_; }
  int MaxConcurrency() const override { return concurrency_; }

  mutable std::atomic<int> batch_calls{0};

 private:
  std::atomic<int>* calls_;
  const bool batches_;
  const int concurrency_;
};

google::protobuf::RepeatedPtrField<v1::VerifyItem> Items(
    const std::vector<std::string>& responses, const std::string& answer = "42") {
  google::protobuf::RepeatedPtrField<v1::VerifyItem> items;
  for (const std::string& r : responses) {
    v1::VerifyItem* item = items.Add();
    item->set_prompt("what is 6*7?");
    item->set_response(r);
    item->set_answer(answer);
  }
  return items;
}

v1::VerifierConfig Config() {
  v1::VerifierConfig c;
  c.set_name("fake");
  c.set_breaker_failures(0);
  return c;
}

TEST(VerifierPool, CacheAnswersRepeatsWithoutCallingAndCountsHits) {
  std::atomic<int> calls{0};
  auto pool = NewVerifierPool(std::make_unique<FakeVerifier>(&calls), Config());
  v1::VerifierStats first;
  std::vector<v1::VerifyResult> a = pool->VerifyBatchWithStats(Items({"42", "41", "42"}), &first);
  EXPECT_EQ(calls.load(), 2);  // the repeated "42" was verified once
  EXPECT_EQ(first.cache_hits(), 1);
  EXPECT_EQ(first.items(), 3);
  EXPECT_EQ(first.calls(), 2);
  EXPECT_EQ(first.verifier(), "fake");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].verdict(), v1::CORRECT);
  EXPECT_EQ(a[1].verdict(), v1::WRONG);
  EXPECT_EQ(a[2].SerializeAsString(), a[0].SerializeAsString());

  v1::VerifierStats second;
  std::vector<v1::VerifyResult> b = pool->VerifyBatchWithStats(Items({"41", "42"}), &second);
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(second.cache_hits(), 2);
  EXPECT_EQ(second.calls(), 0);
  EXPECT_EQ(b[0].SerializeAsString(), a[1].SerializeAsString());

  // Another ground truth is another key.
  (void)pool->VerifyBatch(Items({"42"}, "43"));
  EXPECT_EQ(calls.load(), 3);
}

TEST(VerifierPool, ErrorsAndTimeoutsAreNeverCached) {
  std::atomic<int> calls{0};
  auto pool = NewVerifierPool(std::make_unique<FakeVerifier>(&calls), Config());
  (void)pool->VerifyBatch(Items({"error", "timeout"}));
  (void)pool->VerifyBatch(Items({"error", "timeout"}));
  EXPECT_EQ(calls.load(), 4);
}

TEST(VerifierPool, CacheEntriesZeroTurnsItOff) {
  std::atomic<int> calls{0};
  v1::VerifierConfig c = Config();
  c.set_cache_entries(0);
  auto pool = NewVerifierPool(std::make_unique<FakeVerifier>(&calls), c);
  v1::VerifierStats s;
  (void)pool->VerifyBatchWithStats(Items({"42", "42"}), &s);
  (void)pool->VerifyBatchWithStats(Items({"42"}), &s);
  EXPECT_EQ(calls.load(), 3);
  EXPECT_EQ(s.cache_hits(), 0);
  EXPECT_EQ(s.items(), 3);
}

TEST(VerifierPool, CacheIsBoundedLeastRecentlyUsedFirstOut) {
  std::atomic<int> calls{0};
  v1::VerifierConfig c = Config();
  c.set_cache_entries(2);
  auto pool = NewVerifierPool(std::make_unique<FakeVerifier>(&calls), c);
  (void)pool->VerifyBatch(Items({"1"}));
  (void)pool->VerifyBatch(Items({"2"}));
  (void)pool->VerifyBatch(Items({"1"}));  // hit; "2" is now the oldest
  (void)pool->VerifyBatch(Items({"3"}));  // evicts "2"
  EXPECT_EQ(calls.load(), 3);
  (void)pool->VerifyBatch(Items({"1"}));
  EXPECT_EQ(calls.load(), 3);
  (void)pool->VerifyBatch(Items({"2"}));
  EXPECT_EQ(calls.load(), 4);
}

TEST(VerifierPool, CountsTimeoutsErrorsRetriesAndLatency) {
  std::atomic<int> calls{0};
  auto pool = NewVerifierPool(std::make_unique<FakeVerifier>(&calls), Config());
  v1::VerifierStats s;
  std::vector<v1::VerifyResult> r =
      pool->VerifyBatchWithStats(Items({"timeout", "error", "retried", "throw", "42"}), &s);
  EXPECT_EQ(s.timeouts(), 1);
  EXPECT_EQ(s.errors(), 2);  // "error" and the throw
  EXPECT_EQ(s.retries(), 2);
  EXPECT_EQ(s.calls(), 5);
  EXPECT_GE(s.latency_p99_seconds(), s.latency_p50_seconds());
  EXPECT_GE(s.latency_p50_seconds(), 0);
  EXPECT_EQ(r[3].verdict(), v1::ERROR);
  EXPECT_NE(r[3].detail().find("verifier threw: boom"), std::string::npos);
  EXPECT_EQ(r[0].reward(), -1);  // the verifier's timeout reward stands
  EXPECT_EQ(r[3].failure(), v1::VerifyResult::CALL_FAILED);
  EXPECT_EQ(s.errors_by_reason().at("verifier"), 1);
  EXPECT_EQ(s.errors_by_reason().at("call_failed"), 1);
  EXPECT_EQ(s.timeouts_by_reason().at("verifier"), 1);
  EXPECT_EQ(s.reported_size(), 0);
}

TEST(VerifierPool, RecordsTheNameTheVerifierReports) {
  std::atomic<int> calls{0};
  auto pool = NewVerifierPool(std::make_unique<FakeVerifier>(&calls), Config());
  v1::VerifierStats s;
  (void)pool->VerifyBatchWithStats(Items({"named", "1", "named"}), &s);
  EXPECT_EQ(s.verifier(), "fake");
  ASSERT_EQ(s.reported_size(), 1);
  EXPECT_EQ(s.reported(0), "fake-service@7");
}

TEST(VerifierPool, BatchVerifierGetsOneCallWithTheMisses) {
  std::atomic<int> calls{0};
  auto fake = std::make_unique<FakeVerifier>(&calls, /*batches=*/true);
  FakeVerifier* raw = fake.get();
  auto pool = NewVerifierPool(std::move(fake), Config());
  (void)pool->VerifyBatch(Items({"1"}));
  v1::VerifierStats s;
  std::vector<v1::VerifyResult> r = pool->VerifyBatchWithStats(Items({"1", "2", "3", "2"}), &s);
  EXPECT_EQ(raw->batch_calls.load(), 2);
  EXPECT_EQ(calls.load(), 3);  // "1" once, then "2" and "3"
  EXPECT_EQ(s.calls(), 1);
  EXPECT_EQ(s.cache_hits(), 2);
  EXPECT_EQ(r[3].SerializeAsString(), r[1].SerializeAsString());
}

TEST(VerifierPool, ConcurrentCallsKeepResultsInOrder) {
  std::atomic<int> calls{0};
  auto pool = NewVerifierPool(std::make_unique<FakeVerifier>(&calls, false, 4), Config());
  std::vector<std::string> responses;
  for (int i = 0; i < 50; ++i) responses.push_back(std::to_string(i));
  std::vector<v1::VerifyResult> r = pool->VerifyBatch(Items(responses, "7"));
  ASSERT_EQ(r.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(r[i].verdict(), i == 7 ? v1::CORRECT : v1::WRONG) << i;
  }
  EXPECT_EQ(calls.load(), 50);
}

TEST(VerifierPool, BreakerOpensAfterConsecutiveFailedCallsPausesAndTriesAgain) {
  std::atomic<int> calls{0};
  env::testing::FakeEnv clock;
  std::vector<std::string> log;
  v1::VerifierConfig c = Config();
  c.set_breaker_failures(3);
  c.set_breaker_pause_ms(1000);
  c.set_reward_wrong(-0.5);
  c.set_cache_entries(0);  // every item is a call
  PoolOptions options;
  options.env = &clock;
  options.log = [&log](const std::string& line) { log.push_back(line); };
  auto pool = NewVerifierPool(std::make_unique<FakeVerifier>(&calls), c, options);

  // Two failures, a good call, two failures: never three in a row.
  v1::VerifierStats s;
  (void)pool->VerifyBatchWithStats(Items({"error", "timeout", "1", "error", "error"}), &s);
  EXPECT_EQ(s.breaker_openings(), 0);
  ASSERT_EQ(log.size(), 3u);  // failing, recovered, failing: one line per change
  EXPECT_EQ(log[0],
            "verifier fake: failing: fake; the circuit opens after 3 consecutive "
            "failed calls");
  EXPECT_EQ(log[1], "verifier fake: recovered after 2 consecutive failed calls");
  EXPECT_EQ(log[2], log[0]);
  // The third failure in a row opens it; the rest of the request is refused.
  s.Clear();
  std::vector<v1::VerifyResult> r = pool->VerifyBatchWithStats(Items({"error", "3", "4"}), &s);
  EXPECT_EQ(s.breaker_openings(), 1);
  EXPECT_EQ(s.breaker_rejected(), 2);
  EXPECT_EQ(s.errors(), 1);
  EXPECT_EQ(calls.load(), 6);
  EXPECT_EQ(r[1].verdict(), v1::ERROR);
  EXPECT_EQ(r[1].failure(), v1::VerifyResult::CIRCUIT_OPEN);
  EXPECT_EQ(r[1].reward(), -0.5f);
  EXPECT_EQ(r[1].detail(),
            "circuit open: fake failed 3 consecutive calls (last: fake); paused "
            "until 2023-11-14T22:13:21.000Z");
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[3], "verifier fake: " + r[1].detail());
  // During the pause nothing is called.
  clock.Advance(absl::Milliseconds(999));
  (void)pool->VerifyBatch(Items({"3"}));
  EXPECT_EQ(calls.load(), 6);

  // The trial fails: half-open, then open again at once.
  clock.Advance(absl::Milliseconds(2));
  s.Clear();
  r = pool->VerifyBatchWithStats(Items({"error", "3"}), &s);
  EXPECT_EQ(calls.load(), 7);
  EXPECT_EQ(s.breaker_openings(), 1);
  EXPECT_EQ(s.breaker_rejected(), 1);
  ASSERT_EQ(log.size(), 6u);
  EXPECT_EQ(log[4], "verifier fake: half-open: the pause is over; one trial call decides");
  EXPECT_EQ(log[5], "verifier fake: trial call failed: " + r[1].detail());

  // A good trial closes it: half-open, recovered.
  clock.Advance(absl::Milliseconds(1001));
  r = pool->VerifyBatch(Items({"3", "4", "error", "error"}));
  EXPECT_EQ(calls.load(), 11);
  EXPECT_EQ(r[1].verdict(), v1::WRONG);
  ASSERT_EQ(log.size(), 9u);
  EXPECT_EQ(log[6], log[4]);
  EXPECT_EQ(log[7], "verifier fake: recovered after 4 consecutive failed calls");
  EXPECT_EQ(log[8], log[0]);  // the "error" after it starts failing again
}

// A batch is one call: one failed batch (every item ERROR or TIMEOUT) never
// opens the breaker, and a batch with one good item is a good call.
TEST(VerifierPool, BreakerCountsBatchesOfABatchVerifierAsCalls) {
  std::atomic<int> calls{0};
  env::testing::FakeEnv clock;
  std::vector<std::string> log;
  v1::VerifierConfig c = Config();
  c.set_breaker_failures(2);
  c.set_breaker_pause_ms(50);
  PoolOptions options;
  options.env = &clock;
  options.log = [&log](const std::string& line) { log.push_back(line); };
  auto pool = NewVerifierPool(std::make_unique<FakeVerifier>(&calls, true), c, options);
  v1::VerifierStats s;
  (void)pool->VerifyBatchWithStats(Items({"error", "timeout", "error", "timeout"}), &s);
  EXPECT_EQ(s.breaker_openings(), 0);
  (void)pool->VerifyBatchWithStats(Items({"1", "error"}), &s);
  EXPECT_EQ(s.breaker_openings(), 0);
  EXPECT_EQ(log.size(), 2u);  // failing, recovered
  (void)pool->VerifyBatchWithStats(Items({"timeout"}), &s);
  (void)pool->VerifyBatchWithStats(Items({"error", "x"}), &s);  // "x" is WRONG: a good call
  EXPECT_EQ(s.breaker_openings(), 0);
  (void)pool->VerifyBatchWithStats(Items({"timeout"}), &s);
  s.Clear();
  (void)pool->VerifyBatchWithStats(Items({"error"}), &s);
  EXPECT_EQ(s.breaker_openings(), 1);
  s.Clear();
  const int before = calls.load();
  std::vector<v1::VerifyResult> r = pool->VerifyBatchWithStats(Items({"5", "6", "7"}), &s);
  EXPECT_EQ(calls.load(), before);
  EXPECT_EQ(s.breaker_rejected(), 3);
  EXPECT_EQ(s.errors(), 0);
  EXPECT_EQ(s.calls(), 0);
  for (const auto& x : r) EXPECT_EQ(x.detail().rfind("circuit open: fake failed 2", 0), 0u);
}

TEST(VerifierPool, BreakerOffStillSaysWhenTheVerifierFails) {
  std::atomic<int> calls{0};
  std::vector<std::string> log;
  PoolOptions options;
  options.log = [&log](const std::string& line) { log.push_back(line); };
  v1::VerifierConfig c = Config();
  c.set_cache_entries(0);
  auto pool = NewVerifierPool(std::make_unique<FakeVerifier>(&calls), c, options);
  v1::VerifierStats s;
  (void)pool->VerifyBatchWithStats(Items(std::vector<std::string>(20, "timeout")), &s);
  EXPECT_EQ(s.breaker_openings(), 0);
  EXPECT_EQ(calls.load(), 20);
  ASSERT_EQ(log.size(), 1u);  // 20 failed calls, one line
  EXPECT_EQ(log[0], "verifier fake: failing: fake");
}

TEST(VerifierPool, RegistryWrapsEveryVerifierAndTheLocalClientReportsStats) {
  VerifierRegistry registry;
  ASSERT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  v1::VerifierConfig c;
  c.set_name("exact_match");
  c.set_version("v2");
  absl::StatusOr<std::unique_ptr<Verifier>> v = registry.Create(c);
  ASSERT_TRUE(v.ok()) << v.status();
  std::unique_ptr<VerifierClient> client = NewLocalVerifierClient(*std::move(v));
  v1::VerifyRequest request;
  *request.mutable_items() = Items({"42", "42", "x"});
  absl::StatusOr<v1::VerifyResponse> response = client->Verify(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->stats_size(), 1);
  EXPECT_EQ(response->stats(0).verifier(), "exact_match@v2");
  EXPECT_EQ(response->stats(0).items(), 3);
  EXPECT_EQ(response->stats(0).cache_hits(), 1);
  EXPECT_EQ(response->results(1).verdict(), v1::CORRECT);
  EXPECT_EQ(response->results(2).verdict(), v1::WRONG);
}

}  // namespace
}  // namespace trellis::verifier
