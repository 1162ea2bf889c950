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
// "timeout" TIMEOUT, "retried" CORRECT after 2 retries, "throw" throws;
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
  c.set_breaker_window(0);
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

TEST(VerifierPool, BreakerOpensPausesAndTriesAgain) {
  std::atomic<int> calls{0};
  env::testing::FakeEnv clock;
  std::vector<std::string> log;
  v1::VerifierConfig c = Config();
  c.set_breaker_window(4);
  c.set_breaker_error_rate(0.5);
  c.set_breaker_pause_ms(1000);
  c.set_reward_wrong(-0.5);
  PoolOptions options;
  options.env = &clock;
  options.log = [&log](const std::string& line) { log.push_back(line); };
  auto pool = NewVerifierPool(std::make_unique<FakeVerifier>(&calls), c, options);

  // 2 bad of 4 is not more than half: still closed.
  v1::VerifierStats s;
  (void)pool->VerifyBatchWithStats(Items({"1", "error", "timeout", "2"}), &s);
  EXPECT_EQ(s.breaker_openings(), 0);
  EXPECT_TRUE(log.empty());
  // One more error: 3 of the last 4.
  s.Clear();
  std::vector<v1::VerifyResult> r = pool->VerifyBatchWithStats(Items({"error", "3", "4"}), &s);
  EXPECT_EQ(s.breaker_openings(), 1);
  EXPECT_EQ(s.breaker_rejected(), 2);  // "3" and "4" came after the opening
  EXPECT_EQ(s.errors(), 1);
  EXPECT_EQ(calls.load(), 5);
  EXPECT_EQ(r[1].verdict(), v1::ERROR);
  EXPECT_EQ(r[1].reward(), -0.5f);
  EXPECT_EQ(r[1].detail().rfind("circuit open: fake failed 3 of the last 4 items; paused until "
                                "2023-11-14T22:13:21.000Z",
                                0),
            0u)
      << r[1].detail();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("circuit open: fake failed 3 of the last 4 items"), std::string::npos);
  // Rejected items are not cached; during the pause nothing is called.
  clock.Advance(absl::Milliseconds(999));
  (void)pool->VerifyBatch(Items({"3"}));
  EXPECT_EQ(calls.load(), 5);
  EXPECT_EQ(log.size(), 1u);  // one line per opening

  // Half-open: the trial fails, so it opens again at once.
  clock.Advance(absl::Milliseconds(2));
  s.Clear();
  r = pool->VerifyBatchWithStats(Items({"error", "3"}), &s);
  EXPECT_EQ(calls.load(), 6);
  EXPECT_EQ(s.breaker_openings(), 1);
  EXPECT_EQ(s.breaker_rejected(), 1);
  EXPECT_EQ(log.size(), 2u);

  // Half-open again: a good trial closes it with a fresh window.
  clock.Advance(absl::Milliseconds(1001));
  r = pool->VerifyBatch(Items({"3", "4", "error", "error"}));
  EXPECT_EQ(calls.load(), 9);  // the two "error"s are one item
  EXPECT_EQ(r[1].verdict(), v1::WRONG);
  EXPECT_EQ(log.size(), 2u);
}

TEST(VerifierPool, BreakerRejectsWholeBatchesOfABatchVerifier) {
  std::atomic<int> calls{0};
  env::testing::FakeEnv clock;
  v1::VerifierConfig c = Config();
  c.set_breaker_window(2);
  c.set_breaker_error_rate(0.4);
  c.set_breaker_pause_ms(50);
  PoolOptions options;
  options.env = &clock;
  options.log = [](const std::string&) {};
  auto pool = NewVerifierPool(std::make_unique<FakeVerifier>(&calls, true), c, options);
  v1::VerifierStats s;
  (void)pool->VerifyBatchWithStats(Items({"error", "timeout"}), &s);
  EXPECT_EQ(s.breaker_openings(), 1);
  s.Clear();
  std::vector<v1::VerifyResult> r = pool->VerifyBatchWithStats(Items({"1", "2", "3"}), &s);
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(s.breaker_rejected(), 3);
  EXPECT_EQ(s.errors(), 0);
  EXPECT_EQ(s.calls(), 0);
  for (const auto& x : r) EXPECT_EQ(x.detail().rfind("circuit open: fake", 0), 0u);
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
