#include "loop/streaming_verify.h"

#include <thread>

#include "gtest/gtest.h"

namespace trellis::loop {
namespace {

// CORRECT when the response equals the answer; records each call's size.
class FakeVerifier final : public verifier::VerifierClient {
 public:
  absl::StatusOr<v1::VerifyResponse> Verify(const v1::VerifyRequest& request) override {
    calls.push_back(request.items_size());
    v1::VerifyResponse response;
    for (const v1::VerifyItem& item : request.items()) {
      v1::VerifyResult* r = response.add_results();
      const bool right = item.response() == item.answer();
      r->set_verdict(right ? v1::CORRECT : v1::WRONG);
      r->set_reward(right ? 1 : 0);
    }
    return response;
  }
  std::vector<int> calls;
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
