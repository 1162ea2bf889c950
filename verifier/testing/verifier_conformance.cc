#include "verifier/testing/verifier_conformance.h"

#include <stdexcept>
#include <vector>

#include "gmock/gmock.h"

namespace trellis::verifier::conformance {
namespace {

using ::testing::HasSubstr;

class ExactVerifier final : public Verifier {
 public:
  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    if (item.response() == "throw") throw std::runtime_error("boom");
    v1::VerifyResult r;
    if (item.response().empty()) {
      r.set_verdict(v1::UNPARSEABLE);
    } else if (item.response() == item.answer()) {
      r.set_verdict(v1::CORRECT);
      r.set_reward(1);
    } else {
      r.set_verdict(v1::WRONG);
    }
    r.set_detail("exact: " + item.response());
    return r;
  }
  int MaxConcurrency() const override { return 4; }
};

v1::VerifyRequest Items(const std::vector<std::pair<std::string, std::string>>& pairs) {
  v1::VerifyRequest request;
  for (const auto& [response, answer] : pairs) {
    v1::VerifyItem* item = request.add_items();
    item->set_prompt("what is " + answer + "?");
    item->set_response(response);
    item->set_answer(answer);
  }
  return request;
}

}  // namespace

std::string VerifierFactoryName(const ::testing::TestParamInfo<VerifierFactory>& info) {
  return info.param.name;
}

void VerifierConformanceTest::SetUp() {
  absl::StatusOr<BoundVerifier> bound = GetParam().make(std::make_unique<ExactVerifier>());
  ASSERT_TRUE(bound.ok()) << bound.status();
  bound_ = *std::move(bound);
}

TEST_P(VerifierConformanceTest, OneResultPerItemInOrder) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (int i = 0; i < 40; ++i) {
    const std::string answer = std::to_string(i);
    pairs.push_back({i % 3 == 0 ? answer : (i % 3 == 1 ? "x" + answer : ""), answer});
  }
  absl::StatusOr<v1::VerifyResponse> out = client().Verify(Items(pairs));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->results_size(), 40);
  for (int i = 0; i < 40; ++i) {
    const v1::VerifyResult& r = out->results(i);
    const v1::Verdict expected = i % 3 == 0 ? v1::CORRECT : (i % 3 == 1 ? v1::WRONG : v1::UNPARSEABLE);
    EXPECT_EQ(r.verdict(), expected) << "item " << i << ": " << r.detail();
    EXPECT_EQ(r.reward(), i % 3 == 0 ? 1.0f : 0.0f) << "item " << i;
    EXPECT_EQ(r.detail(), "exact: " + pairs[i].first) << "item " << i;
  }
}

TEST_P(VerifierConformanceTest, NoItemsNoResults) {
  absl::StatusOr<v1::VerifyResponse> out = client().Verify(v1::VerifyRequest());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->results_size(), 0);
}

TEST_P(VerifierConformanceTest, AnItemTheVerifierThrowsOnIsThatItemsError) {
  absl::StatusOr<v1::VerifyResponse> out =
      client().Verify(Items({{"1", "1"}, {"throw", "2"}, {"4", "3"}}));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->results_size(), 3);
  EXPECT_EQ(out->results(0).verdict(), v1::CORRECT);
  EXPECT_EQ(out->results(1).verdict(), v1::ERROR);
  EXPECT_THAT(out->results(1).detail(), HasSubstr("boom"));
  EXPECT_EQ(out->results(2).verdict(), v1::WRONG);
}

TEST_P(VerifierConformanceTest, TheSameRequestGetsTheSameResults) {
  const v1::VerifyRequest request = Items({{"1", "1"}, {"2", "3"}, {"", "4"}, {"5", "5"}});
  absl::StatusOr<v1::VerifyResponse> first = client().Verify(request);
  absl::StatusOr<v1::VerifyResponse> second = client().Verify(request);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ(first->results_size(), second->results_size());
  for (int i = 0; i < first->results_size(); ++i) {
    EXPECT_EQ(first->results(i).verdict(), second->results(i).verdict()) << i;
    EXPECT_EQ(first->results(i).reward(), second->results(i).reward()) << i;
    EXPECT_EQ(first->results(i).detail(), second->results(i).detail()) << i;
  }
}

}  // namespace trellis::verifier::conformance
