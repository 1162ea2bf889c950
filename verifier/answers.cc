// Answer-checking built-ins: regex (format rewards), math (\boxed{} or the
// last number) and countdown (an arithmetic expression over given numbers,
// evaluated exactly by our own parser).

#include <algorithm>
#include <cmath>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "verifier/internal/rational.h"
#include "verifier/internal/register.h"
#include "verifier/internal/result.h"

namespace trellis::verifier::internal {
namespace {

class Regex : public Verifier {
 public:
  Regex(const v1::VerifierConfig& c, std::regex re) : config_(c), re_(std::move(re)) {}

  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    bool matched = false;
    try {
      matched = std::regex_search(item.response(), re_);
    } catch (const std::regex_error& e) {  // e.g. error_complexity on huge input
      return Result(v1::ERROR, config_.reward_wrong(),
                    absl::StrCat("regex search failed: ", e.what()));
    }
    if (matched) {
      return Result(v1::CORRECT, config_.reward_correct(),
                    absl::StrCat("matched /", config_.pattern(), "/"));
    }
    return Result(v1::WRONG, config_.reward_wrong(),
                  absl::StrCat("no match for /", config_.pattern(), "/ in ",
                               Show(item.response())));
  }

 private:
  v1::VerifierConfig config_;
  std::regex re_;
};

// The content of the last complete \boxed{...} (nested braces allowed).
std::optional<std::string> LastBoxed(absl::string_view s) {
  std::optional<std::string> found;
  size_t from = 0;
  while (true) {
    const size_t at = s.find("\\boxed{", from);
    if (at == absl::string_view::npos) return found;
    const size_t open = at + 7;
    int depth = 1;
    size_t i = open;
    for (; i < s.size() && depth > 0; ++i) {
      if (s[i] == '{') ++depth;
      if (s[i] == '}') --depth;
    }
    if (depth == 0) found = std::string(s.substr(open, i - 1 - open));
    from = open;
  }
}

// The last "-?\d+(,\d{3})*(\.\d+)?" of `s`, thousands commas removed.
std::optional<std::string> LastNumber(absl::string_view s) {
  std::optional<std::string> found;
  size_t i = 0;
  while (i < s.size()) {
    if (!absl::ascii_isdigit(s[i])) {
      ++i;
      continue;
    }
    std::string number = (i > 0 && s[i - 1] == '-') ? "-" : "";
    while (i < s.size()) {
      if (absl::ascii_isdigit(s[i])) {
        number += s[i++];
      } else if (s[i] == ',' && i + 3 < s.size() + 0 && absl::ascii_isdigit(s[i + 1]) &&
                 absl::ascii_isdigit(s[i + 2]) && absl::ascii_isdigit(s[i + 3]) &&
                 (i + 4 == s.size() || !absl::ascii_isdigit(s[i + 4]))) {
        ++i;  // thousands separator
      } else if (s[i] == '.' && i + 1 < s.size() && absl::ascii_isdigit(s[i + 1]) &&
                 number.find('.') == std::string::npos) {
        number += s[i++];
      } else {
        break;
      }
    }
    found = number;
  }
  return found;
}

// A number written as "-3", "2.5", "1,000", "3/4", "\frac{3}{4}",
// "-\dfrac{1}{2}", "50\%", possibly inside "$...$".
std::optional<double> ParseMathNumber(absl::string_view text) {
  std::string s(text);
  s = absl::StrReplaceAll(s, {{"$", ""}, {"\\!", ""}, {"\\,", ""}, {" ", ""}, {"\\%", ""},
                              {"%", ""}, {"\\dfrac", "\\frac"}, {"\\tfrac", "\\frac"}});
  absl::string_view v = absl::StripAsciiWhitespace(s);
  double sign = 1;
  if (absl::ConsumePrefix(&v, "-")) sign = -1;
  if (absl::ConsumePrefix(&v, "\\frac{")) {
    const size_t mid = v.find("}{");
    if (mid == absl::string_view::npos || !absl::EndsWith(v, "}")) return std::nullopt;
    double a, b;
    if (!absl::SimpleAtod(v.substr(0, mid), &a) ||
        !absl::SimpleAtod(v.substr(mid + 2, v.size() - mid - 3), &b) || b == 0) {
      return std::nullopt;
    }
    return sign * a / b;
  }
  const std::string plain = absl::StrReplaceAll(v, {{",", ""}});
  const size_t slash = plain.find('/');
  double a, b;
  if (slash != std::string::npos) {
    if (!absl::SimpleAtod(plain.substr(0, slash), &a) ||
        !absl::SimpleAtod(plain.substr(slash + 1), &b) || b == 0) {
      return std::nullopt;
    }
    return sign * a / b;
  }
  if (plain.empty() || plain.find_first_not_of("0123456789.") != std::string::npos ||
      !absl::SimpleAtod(plain, &a)) {
    return std::nullopt;
  }
  return sign * a;
}

std::string Canonical(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (!absl::ascii_isspace(c) && c != '$') out += c;
  }
  return out;
}

class Math : public Verifier {
 public:
  explicit Math(const v1::VerifierConfig& c) : config_(c) {}

  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    const std::optional<std::string> boxed = LastBoxed(item.response());
    const std::optional<std::string> got = boxed ? boxed : LastNumber(item.response());
    if (!got) {
      return Result(v1::UNPARSEABLE, config_.reward_unparseable(),
                    "no \\boxed{} and no number in the response");
    }
    const std::string from = boxed ? "boxed " : "last number ";
    const std::optional<std::string> answer_boxed = LastBoxed(item.answer());
    const std::string want = answer_boxed ? *answer_boxed : item.answer();
    const std::optional<double> got_v = ParseMathNumber(*got);
    const std::optional<double> want_v = ParseMathNumber(want);
    const std::string detail = absl::StrCat(from, Show(*got), ", expected ", Show(want));
    bool correct = false;
    if (got_v && want_v) {
      correct = std::fabs(*got_v - *want_v) <= config_.tolerance() ||
                *got_v == *want_v;  // equal infinities
    } else {
      correct = Canonical(*got) == Canonical(want);  // symbolic: compare the text
    }
    return correct ? Result(v1::CORRECT, config_.reward_correct(), detail)
                   : Result(v1::WRONG, config_.reward_wrong(), detail);
  }

 private:
  v1::VerifierConfig config_;
};

struct CountdownTask {
  int64_t target = 0;
  std::vector<int64_t> numbers;
};

// "24|3,4,6,1" or {"target": 24, "numbers": [3, 4, 6, 1]}.
std::optional<CountdownTask> ParseCountdownAnswer(absl::string_view answer,
                                                  std::string* error) {
  CountdownTask task;
  const absl::string_view a = absl::StripAsciiWhitespace(answer);
  if (absl::StartsWith(a, "{")) {
    const nlohmann::json j = nlohmann::json::parse(a, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("target") ||
        !j["target"].is_number_integer() || !j.contains("numbers") ||
        !j["numbers"].is_array()) {
      *error = "expected {\"target\": int, \"numbers\": [int, ...]}";
      return std::nullopt;
    }
    task.target = j["target"].get<int64_t>();
    for (const auto& n : j["numbers"]) {
      if (!n.is_number_integer()) {
        *error = "numbers must be integers";
        return std::nullopt;
      }
      task.numbers.push_back(n.get<int64_t>());
    }
  } else {
    const std::vector<absl::string_view> parts = absl::StrSplit(a, '|');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &task.target)) {
      *error = "expected \"TARGET|N1,N2,...\"";
      return std::nullopt;
    }
    for (absl::string_view n : absl::StrSplit(parts[1], ',')) {
      int64_t v;
      if (!absl::SimpleAtoi(n, &v)) {
        *error = absl::StrCat("number ", Show(n), " is not an integer");
        return std::nullopt;
      }
      task.numbers.push_back(v);
    }
  }
  if (task.numbers.empty()) {
    *error = "no numbers given";
    return std::nullopt;
  }
  return task;
}

// The expression of a response: inside <answer>...</answer> when present,
// else the last non-empty line; a trailing "= result" is dropped.
std::string ExtractExpression(absl::string_view response) {
  absl::string_view r = response;
  const size_t open = r.rfind("<answer>");
  if (open != absl::string_view::npos) {
    r = r.substr(open + 8);
    r = r.substr(0, r.find("</answer>"));
  } else {
    std::vector<absl::string_view> lines =
        absl::StrSplit(r, '\n', absl::SkipWhitespace());
    r = lines.empty() ? absl::string_view() : lines.back();
  }
  r = r.substr(0, r.find('='));
  return std::string(absl::StripAsciiWhitespace(r));
}

class Countdown : public Verifier {
 public:
  explicit Countdown(const v1::VerifierConfig& c) : config_(c) {}

  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    std::string error;
    std::optional<CountdownTask> task = ParseCountdownAnswer(item.answer(), &error);
    if (!task) {
      return Result(v1::ERROR, config_.reward_wrong(),
                    absl::StrCat("answer ", Show(item.answer()), ": ", error));
    }
    const std::string expr = ExtractExpression(item.response());
    if (expr.empty()) {
      return Result(v1::UNPARSEABLE, config_.reward_unparseable(), "no expression found");
    }
    absl::StatusOr<Evaluation> eval = EvaluateExpression(expr);
    if (!eval.ok() && eval.status().code() == absl::StatusCode::kInvalidArgument) {
      return Result(v1::UNPARSEABLE, config_.reward_unparseable(),
                    absl::StrCat("expression ", Show(expr), ": ", eval.status().message()));
    }
    if (!eval.ok()) {
      return Result(v1::WRONG, config_.reward_wrong(),
                    absl::StrCat("expression ", Show(expr), ": ", eval.status().message()));
    }
    std::vector<int64_t> used = eval->literals, given = task->numbers;
    std::sort(used.begin(), used.end());
    std::sort(given.begin(), given.end());
    if (used != given) {
      return Result(v1::WRONG, config_.reward_wrong(),
                    absl::StrCat("expression ", Show(expr), " uses [", absl::StrJoin(used, ","),
                                 "], must use each of [", absl::StrJoin(given, ","),
                                 "] exactly once"));
    }
    const std::string detail =
        absl::StrCat(Show(expr), " = ", eval->value.ToString(), ", target ", task->target);
    if (eval->value == Rational{task->target, 1}) {
      return Result(v1::CORRECT, config_.reward_correct(), detail);
    }
    return Result(v1::WRONG, config_.reward_wrong(), detail);
  }

 private:
  v1::VerifierConfig config_;
};

// The regex verifier's pattern, compiled.
absl::StatusOr<std::regex> CompilePattern(const v1::VerifierConfig& c) {
  if (c.pattern().empty()) {
    return absl::InvalidArgumentError(
        "verifier.pattern: regex needs a non-empty pattern, found \"\"");
  }
  try {
    return std::regex(c.pattern(), std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "verifier.pattern: not a valid ECMAScript regex (", e.what(), "), found ",
        Show(c.pattern())));
  }
}

}  // namespace

absl::Status CheckTolerance(const v1::VerifierConfig& c) {
  if (!(c.tolerance() >= 0) || std::isinf(c.tolerance())) {
    return absl::InvalidArgumentError(
        absl::StrCat("verifier.tolerance: must be a finite number >= 0, found ", c.tolerance()));
  }
  return absl::OkStatus();
}

absl::Status RegisterAnswerVerifiers(VerifierRegistry& registry) {
  absl::Status s = registry.Register(
      "regex",
      [](const v1::VerifierConfig& c) -> absl::StatusOr<std::unique_ptr<Verifier>> {
        absl::StatusOr<std::regex> pattern = CompilePattern(c);
        if (!pattern.ok()) return pattern.status();
        return std::make_unique<Regex>(c, *std::move(pattern));
      },
      [](const v1::VerifierConfig& c) { return CompilePattern(c).status(); });
  if (!s.ok()) return s;
  s = registry.Register(
      "math",
      [](const v1::VerifierConfig& c) -> absl::StatusOr<std::unique_ptr<Verifier>> {
        return std::make_unique<Math>(c);
      },
      CheckTolerance);
  if (!s.ok()) return s;
  return registry.Register(
      "countdown", [](const v1::VerifierConfig& c) -> absl::StatusOr<std::unique_ptr<Verifier>> {
        return std::make_unique<Countdown>(c);
      });
}

}  // namespace trellis::verifier::internal
