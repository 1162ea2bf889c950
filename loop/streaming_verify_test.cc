#include "loop/streaming_verify.h"

#include <thread>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace trellis::loop {
namespace {

// CORRECT when the response equals the answer; records each call's size.
class FakeVerifier : public verifier::VerifierClient {
 public:
  absl::StatusOr<v1::VerifyResponse> Verify(const v1::VerifyRequest& request) override {
    {
      absl::MutexLock lock(&mu);
      calls.push_back(request.items_size());
    }
    v1::VerifyResponse response;
    for (const v1::VerifyItem& item : request.items()) {
      v1::VerifyResult* r = response.add_results();
      const bool right = item.response() == item.answer();
      r->set_verdict(right ? v1::CORRECT : v1::WRONG);
      r->set_reward(right ? 1 : 0);
    }
    return response;
  }
  absl::Mutex mu;
  std::vector<int> calls;
};

// A verifier whose calls each wait, up to a minute, until `want` calls are
// in flight together (as a remote service answers calls side by side);
// `met` says whether they were.
class GatheringVerifier final : public FakeVerifier {
 public:
  explicit GatheringVerifier(int want) : want_(want) {}
  absl::StatusOr<v1::VerifyResponse> Verify(const v1::VerifyRequest& request) override {
    {
      absl::MutexLock lock(&gather_mu_);
      ++in_flight_;
      met_ = met_ || in_flight_ >= want_;
      gather_mu_.AwaitWithTimeout(absl::Condition(&met_), absl::Minutes(1));
    }
    return FakeVerifier::Verify(request);
  }
  bool met() {
    absl::MutexLock lock(&gather_mu_);
    return met_;
  }

 private:
  const int want_;
  absl::Mutex gather_mu_;
  int in_flight_ = 0;
  bool met_ = false;
};

v1::Sample S(uint64_t prompt, int index, const std::string& text) {
  v1::Sample s;
  s.set_prompt_id(prompt);
  s.set_index(index);
  s.set_response_text(text);
  return s;
}

TEST(StreamingVerifyTest, PartsAreVerifiedAsTheyComeAndVerdictsFollowTheRolloutOrder) {
  data::Example a{7, "3+4=", "7"}, b{9, "1+1=", "2"};
  FakeVerifier verifier;
  ledger::Ledger ledger;
  StreamingVerify streaming(&verifier, &ledger, {{7, &a}, {9, &b}});
  // The second prompt's group arrives first.
  v1::GenerateResponse second, first;
  *second.add_samples() = S(9, 0, "2");
  *second.add_samples() = S(9, 1, "3");
  *first.add_samples() = S(7, 0, "6");
  *first.add_samples() = S(7, 1, "7");
  streaming.Add(second);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  streaming.Add(first);

  v1::GenerateResponse all;
  for (const auto* part : {&first, &second}) {
    for (const v1::Sample& s : part->samples()) *all.add_samples() = s;
  }
  absl::StatusOr<StreamingVerify::Result> result =
      streaming.Finish(all.samples(), absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->verdicts.results_size(), 4);
  EXPECT_EQ(result->verdicts.results(0).verdict(), v1::WRONG);    // 7: "6"
  EXPECT_EQ(result->verdicts.results(1).verdict(), v1::CORRECT);  // 7: "7"
  EXPECT_EQ(result->verdicts.results(2).verdict(), v1::CORRECT);  // 9: "2"
  EXPECT_EQ(result->verdicts.results(3).verdict(), v1::WRONG);    // 9: "3"
  EXPECT_EQ(verifier.calls, (std::vector<int>{2, 2}));
  // Every verification ran before the (future) end of the rollout.
  EXPECT_DOUBLE_EQ(result->overlap_seconds, result->verify_seconds);
}

TEST(StreamingVerifyTest, PartsWaitingTogetherAreVerifiedSideBySide) {
  data::Example a{7, "3+4=", "7"}, b{9, "1+1=", "2"};
  GatheringVerifier verifier(2);
  ledger::Ledger ledger;
  StreamingVerify streaming(&verifier, &ledger, {{7, &a}, {9, &b}});
  v1::GenerateResponse first, second;
  *first.add_samples() = S(7, 0, "7");
  *second.add_samples() = S(9, 0, "3");
  streaming.Add(first);
  streaming.Add(second);
  v1::GenerateResponse all = first;
  *all.add_samples() = second.samples(0);
  absl::StatusOr<StreamingVerify::Result> result = streaming.Finish(all.samples(), absl::Now());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(verifier.met()) << "the second part waited for the first's call to end";
  EXPECT_EQ(result->verdicts.results(0).verdict(), v1::CORRECT);
  EXPECT_EQ(result->verdicts.results(1).verdict(), v1::WRONG);
}

TEST(StreamingVerifyTest, ASampleFromAPromptNotAskedIsAnError) {
  data::Example a{7, "3+4=", "7"};
  FakeVerifier verifier;
  ledger::Ledger ledger;
  StreamingVerify streaming(&verifier, &ledger, {{7, &a}});
  v1::GenerateResponse part;
  *part.add_samples() = S(8, 0, "x");
  streaming.Add(part);
  absl::StatusOr<StreamingVerify::Result> result = streaming.Finish(part.samples(), absl::Now());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace trellis::loop
