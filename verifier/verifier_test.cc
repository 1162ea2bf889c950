#include "verifier/verifier.h"

#include <stdexcept>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::verifier {
namespace {

using ::testing::HasSubstr;

v1::VerifierConfig Config(const std::string& name, double tolerance = 0) {
  v1::VerifierConfig c;
  c.set_name(name);
  c.set_tolerance(tolerance);
  c.set_reward_correct(1.0f);
  c.set_reward_wrong(-0.5f);
  c.set_reward_unparseable(-1.0f);
  return c;
}

std::unique_ptr<Verifier> Make(const v1::VerifierConfig& config) {
  VerifierRegistry registry;
  EXPECT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  absl::StatusOr<std::unique_ptr<Verifier>> v = registry.Create(config);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::move(*v) : nullptr;
}

v1::VerifyItem Item(const std::string& response, const std::string& answer) {
  v1::VerifyItem item;
  item.set_prompt("12+7=");
  item.set_response(response);
  item.set_answer(answer);
  return item;
}

TEST(VerifierRegistry, RefusesDuplicatesAndNamesKnownVerifiers) {
  VerifierRegistry registry;
  ASSERT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  EXPECT_TRUE(registry.Contains("exact_match"));
  EXPECT_TRUE(registry.Contains("numeric"));
  EXPECT_FALSE(registry.Contains("python"));
  absl::Status s = registry.Register(
      "numeric", [](const v1::VerifierConfig&) -> absl::StatusOr<std::unique_ptr<Verifier>> {
        return nullptr;
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("numeric"));
  EXPECT_EQ(RegisterBuiltinVerifiers(registry).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Register("", nullptr).code(), absl::StatusCode::kInvalidArgument);

  absl::Status missing = registry.Create(Config("python")).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("verifier.name"));
  EXPECT_THAT(missing.message(), HasSubstr("\"python\""));
  EXPECT_THAT(missing.message(), HasSubstr("code_exec, countdown, exact_match, math, numeric, regex, subprocess"));
}

TEST(VerifierRegistry, NumericRefusesNegativeTolerance) {
  VerifierRegistry registry;
  ASSERT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  absl::Status s = registry.Create(Config("numeric", -1)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("verifier.tolerance"));
}

TEST(ExactMatch, TrimsBothSides) {
  auto v = Make(Config("exact_match"));
  v1::VerifyResult r = v->Verify(Item("  19\n", "19 "));
  EXPECT_EQ(r.verdict(), v1::CORRECT);
  EXPECT_FLOAT_EQ(r.reward(), 1.0f);
  r = v->Verify(Item("19.0", "19"));
  EXPECT_EQ(r.verdict(), v1::WRONG);
  EXPECT_FLOAT_EQ(r.reward(), -0.5f);
  EXPECT_THAT(r.detail(), HasSubstr("\"19.0\""));
  EXPECT_EQ(v->Verify(Item("", "")).verdict(), v1::CORRECT);
}

TEST(Numeric, VerdictForEachCase) {
  auto v = Make(Config("numeric"));
  struct Case {
    const char* response;
    const char* answer;
    v1::Verdict verdict;
    float reward;
  };
  const Case cases[] = {
      {"19", "19", v1::CORRECT, 1.0f},
      {"the answer is 19.", "19", v1::CORRECT, 1.0f},
      {"19 not 20", "19", v1::CORRECT, 1.0f},
      {"20 not 19", "19", v1::WRONG, -0.5f},
      {"-42", "-42", v1::CORRECT, 1.0f},
      {"x-42", "-42", v1::CORRECT, 1.0f},
      {"42", "-42", v1::WRONG, -0.5f},
      {"- 42", "-42", v1::WRONG, -0.5f},
      {"19.00", "19", v1::CORRECT, 1.0f},
      {"2.5kg", "2.5", v1::CORRECT, 1.0f},
      {"5-3", "5", v1::CORRECT, 1.0f},
      {"19.", "19", v1::CORRECT, 1.0f},
      {"007", "7", v1::CORRECT, 1.0f},
      {"1e400", "1", v1::CORRECT, 1.0f},  // no exponents: the number is "1"
      {"", "19", v1::UNPARSEABLE, -1.0f},
      {"nineteen", "19", v1::UNPARSEABLE, -1.0f},
      {"-", "19", v1::UNPARSEABLE, -1.0f},
      {"19", "abc", v1::ERROR, -0.5f},
      {"19", "", v1::ERROR, -0.5f},
      {"19", "nan", v1::ERROR, -0.5f},
  };
  for (const Case& c : cases) {
    v1::VerifyResult r = v->Verify(Item(c.response, c.answer));
    EXPECT_EQ(r.verdict(), c.verdict) << c.response << " vs " << c.answer << ": " << r.detail();
    EXPECT_FLOAT_EQ(r.reward(), c.reward) << c.response << " vs " << c.answer;
    EXPECT_FALSE(r.detail().empty());
  }
  v1::VerifyResult r = v->Verify(Item("it is 20", "19"));
  EXPECT_THAT(r.detail(), HasSubstr("parsed \"20\", expected 19"));
  r = v->Verify(Item("19", "abc"));
  EXPECT_THAT(r.detail(), HasSubstr("\"abc\""));
  r = v->Verify(Item(std::string(400, '9'), "1"));
  EXPECT_EQ(r.verdict(), v1::WRONG);
}

TEST(Numeric, Tolerance) {
  auto v = Make(Config("numeric", 0.01));
  EXPECT_EQ(v->Verify(Item("3.14", "3.14159")).verdict(), v1::CORRECT);
  EXPECT_EQ(v->Verify(Item("3.1", "3.14159")).verdict(), v1::WRONG);
}

class Throwing : public Verifier {
 public:
  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    if (item.response() == "boom") throw std::runtime_error("kaboom");
    v1::VerifyResult r;
    r.set_verdict(v1::CORRECT);
    r.set_detail(item.response());
    return r;
  }
};

TEST(LocalVerifierClient, OneResultPerItemInOrder) {
  auto client = NewLocalVerifierClient(Make(Config("numeric")));
  v1::VerifyRequest request;
  *request.add_items() = Item("19", "19");
  *request.add_items() = Item("none", "19");
  *request.add_items() = Item("18", "19");
  absl::StatusOr<v1::VerifyResponse> response = client->Verify(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->results_size(), 3);
  EXPECT_EQ(response->results(0).verdict(), v1::CORRECT);
  EXPECT_EQ(response->results(1).verdict(), v1::UNPARSEABLE);
  EXPECT_EQ(response->results(2).verdict(), v1::WRONG);

  response = client->Verify(v1::VerifyRequest());
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->results_size(), 0);
}

TEST(LocalVerifierClient, ThrowingVerifierFailsOnlyItsItem) {
  auto client = NewLocalVerifierClient(std::make_unique<Throwing>());
  v1::VerifyRequest request;
  request.add_items()->set_response("a");
  request.add_items()->set_response("boom");
  request.add_items()->set_response("c");
  absl::StatusOr<v1::VerifyResponse> response = client->Verify(request);
  ASSERT_TRUE(response.ok());
  ASSERT_EQ(response->results_size(), 3);
  EXPECT_EQ(response->results(0).detail(), "a");
  EXPECT_EQ(response->results(1).verdict(), v1::ERROR);
  EXPECT_THAT(response->results(1).detail(), HasSubstr("kaboom"));
  EXPECT_EQ(response->results(2).detail(), "c");

  auto empty = NewLocalVerifierClient(nullptr);
  EXPECT_EQ(empty->Verify(request).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace trellis::verifier
