// regex, math and countdown built-ins, and the rational evaluator.

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verifier/internal/rational.h"
#include "verifier/verifier.h"

namespace trellis::verifier {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Verifier> Make(v1::VerifierConfig c) {
  c.set_reward_correct(1.0f);
  c.set_reward_wrong(-0.5f);
  c.set_reward_unparseable(-1.0f);
  VerifierRegistry registry;
  EXPECT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  absl::StatusOr<std::unique_ptr<Verifier>> v = registry.Create(c);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::move(*v) : nullptr;
}

v1::VerifierConfig Named(const std::string& name) {
  v1::VerifierConfig c;
  c.set_name(name);
  return c;
}

v1::VerifyResult Check(const Verifier& v, const std::string& response, const std::string& answer) {
  v1::VerifyItem item;
  item.set_response(response);
  item.set_answer(answer);
  return v.Verify(item);
}

TEST(Regex, MatchesAnywhereAndRefusesBadPatterns) {
  v1::VerifierConfig c = Named("regex");
  c.set_pattern("<answer>\\d+</answer>$");
  auto v = Make(c);
  EXPECT_EQ(Check(*v, "think... <answer>42</answer>", "").verdict(), v1::CORRECT);
  v1::VerifyResult r = Check(*v, "<answer>x</answer>", "");
  EXPECT_EQ(r.verdict(), v1::WRONG);
  EXPECT_FLOAT_EQ(r.reward(), -0.5f);
  EXPECT_THAT(r.detail(), HasSubstr("no match"));

  VerifierRegistry registry;
  ASSERT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  c.set_pattern("([a-z");
  absl::Status s = registry.Create(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("verifier.pattern"));
  c.set_pattern("");
  EXPECT_EQ(registry.Create(c).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Math, BoxedThenLastNumber) {
  v1::VerifierConfig c = Named("math");
  c.set_tolerance(1e-6);
  auto v = Make(c);
  struct Case {
    const char* response;
    const char* answer;
    v1::Verdict verdict;
  };
  const Case cases[] = {
      {"so \\boxed{42}.", "42", v1::CORRECT},
      {"first \\boxed{1} then \\boxed{42}", "42", v1::CORRECT},
      {"\\boxed{\\frac{1}{2}}", "0.5", v1::CORRECT},
      {"\\boxed{\\dfrac{3}{4}}", "3/4", v1::CORRECT},
      {"\\boxed{-\\frac{1}{2}}", "-1/2", v1::CORRECT},
      {"\\boxed{x^{2}+1}", "x^{2} + 1", v1::CORRECT},  // nested braces, text compare
      {"\\boxed{x^{2}+2}", "x^{2}+1", v1::WRONG},
      {"\\boxed{1,000}", "1000", v1::CORRECT},
      {"it is 12, no wait, 13", "13", v1::CORRECT},
      {"it is 13, no wait, 12", "13", v1::WRONG},
      {"total: 1,234,567 apples", "1234567", v1::CORRECT},
      {"-7 degrees", "-7", v1::CORRECT},
      {"answer 2.50", "2.5", v1::CORRECT},
      {"\\boxed{42", "41", v1::WRONG},  // unclosed box: last number 42
      {"no idea", "3", v1::UNPARSEABLE},
      {"\\boxed{7}", "\\boxed{7}", v1::CORRECT},
  };
  for (const Case& k : cases) {
    v1::VerifyResult r = Check(*v, k.response, k.answer);
    EXPECT_EQ(r.verdict(), k.verdict) << k.response << " vs " << k.answer << ": " << r.detail();
  }
  EXPECT_THAT(Check(*v, "\\boxed{5}", "6").detail(), HasSubstr("boxed \"5\", expected \"6\""));
  EXPECT_THAT(Check(*v, "5", "6").detail(), HasSubstr("last number \"5\""));
}

TEST(Rational, ExactAndOverflowChecked) {
  using internal::EvaluateExpression;
  auto e = EvaluateExpression("(6 - 4) * (3 + 1) * 3");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->value.ToString(), "24");
  EXPECT_EQ(e->literals, (std::vector<int64_t>{6, 4, 3, 1, 3}));
  e = EvaluateExpression("8 / (3 - 8 / 3)");  // needs exact fractions
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->value.ToString(), "24");
  EXPECT_EQ(EvaluateExpression("1/3")->value.ToString(), "1/3");
  EXPECT_EQ(EvaluateExpression("1 / (2 - 2)").status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvaluateExpression("99999999999 * 99999999999").status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvaluateExpression("99999999999999999999").status().code(),
            absl::StatusCode::kOutOfRange);
  for (const char* bad : {"", "1 +", "(1", "1)", "-1", "2 ** 3", "1e3", "__import__('os')",
                          "2 x 3"}) {
    EXPECT_EQ(EvaluateExpression(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(EvaluateExpression(std::string(200, '(') + "1" + std::string(200, ')')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Countdown, ExactlyTheGivenNumbersReachingTheTarget) {
  auto v = Make(Named("countdown"));
  const std::string text = "24|3,4,6,1";
  const std::string json = R"({"target": 24, "numbers": [3, 4, 6, 1]})";
  struct Case {
    const char* response;
    v1::Verdict verdict;
    const char* detail;
  };
  const Case cases[] = {
      {"(6 - 4) * 3 * (1 + 3)", v1::WRONG, "exactly once"},  // 3 twice
      {"6 * 4 * 1 * (3 - 3)", v1::WRONG, "exactly once"},
      {"(6 - 3 + 1) * 4", v1::WRONG, "= 16"},
      {"6 * 4 * (3 - 1)", v1::WRONG, "= 48"},
      {"6 / (1 - 3 / 4)", v1::CORRECT, "= 24"},
      {"Let me think.\n<answer>6 / (1 - 3 / 4)</answer>", v1::CORRECT, "= 24"},
      {"work\n(3 + 1 - 4) * 6 + 24", v1::WRONG, "exactly once"},
      {"6*4*1*3/3", v1::WRONG, "exactly once"},
      {"6 * 4 / (3 - 3 * 1)", v1::WRONG, "division by zero"},
      {"6 * 4 * 1 / (4 - 3 - 1)", v1::WRONG, "division by zero"},
      {"import os", v1::UNPARSEABLE, "expression"},
      {"", v1::UNPARSEABLE, "no expression"},
      {"(6 * 4) * (3 - 1 * 3) ...", v1::UNPARSEABLE, "offset"},
      {"6 * 4 * (3 + 1) / 4 = 24", v1::WRONG, "exactly once"},
      {"(1 + 3 - 4) * 6 = 0", v1::WRONG, "= 0, target 24"},
      {"6 * 4 / 1 * (4 - 3)", v1::WRONG, "exactly once"},
  };
  for (const std::string& answer : {text, json}) {
    for (const Case& k : cases) {
      v1::VerifyResult r = Check(*v, k.response, answer);
      EXPECT_EQ(r.verdict(), k.verdict) << k.response << ": " << r.detail();
      EXPECT_THAT(r.detail(), HasSubstr(k.detail)) << k.response;
    }
  }
  EXPECT_EQ(Check(*v, "4 * 6 * (3 - 1) / 2", "24|3,4,6,1").verdict(), v1::WRONG);
  EXPECT_EQ(Check(*v, "(3 - 1) * (6 + 4) + 4", "24|3,4,6,1,4").verdict(), v1::CORRECT);
  EXPECT_EQ(Check(*v, "1 / (3 - 3)", "0|1,3,3").verdict(), v1::WRONG);
  for (const char* bad : {"24", "x|1,2", "24|1,a", R"({"target": 1})", "{bad json"}) {
    v1::VerifyResult r = Check(*v, "1 + 2", bad);
    EXPECT_EQ(r.verdict(), v1::ERROR) << bad;
    EXPECT_THAT(r.detail(), HasSubstr("answer")) << bad;
  }
}

}  // namespace
}  // namespace trellis::verifier
