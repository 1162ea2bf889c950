// Built-in verifiers exact_match and numeric, and the registration of every
// built-in (the others live in answers.cc, subprocess.cc, code_exec.cc). Rewards come from the job's
// VerifierConfig; an ERROR verdict (a bad ground-truth answer) gets
// reward_wrong.

#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "verifier/internal/register.h"
#include "verifier/internal/result.h"
#include "verifier/verifier.h"

namespace trellis::verifier {
namespace {

using internal::Result;
using internal::Show;

class ExactMatch : public Verifier {
 public:
  explicit ExactMatch(const v1::VerifierConfig& c) : config_(c) {}

  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    const absl::string_view got = absl::StripAsciiWhitespace(item.response());
    const absl::string_view want = absl::StripAsciiWhitespace(item.answer());
    if (got == want) {
      return Result(v1::CORRECT, config_.reward_correct(), absl::StrCat("matched ", Show(want)));
    }
    return Result(v1::WRONG, config_.reward_wrong(),
                  absl::StrCat("got ", Show(got), ", expected ", Show(want)));
  }

 private:
  v1::VerifierConfig config_;
};

// The first "-?\d+(\.\d+)?" in `s`, if any.
std::optional<absl::string_view> FirstNumber(absl::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (!absl::ascii_isdigit(s[i])) continue;
    const size_t start = (i > 0 && s[i - 1] == '-') ? i - 1 : i;
    size_t end = i;
    while (end < s.size() && absl::ascii_isdigit(s[end])) ++end;
    if (end + 1 < s.size() && s[end] == '.' && absl::ascii_isdigit(s[end + 1])) {
      end += 2;
      while (end < s.size() && absl::ascii_isdigit(s[end])) ++end;
    }
    return s.substr(start, end - start);
  }
  return std::nullopt;
}

class Numeric : public Verifier {
 public:
  explicit Numeric(const v1::VerifierConfig& c) : config_(c) {}

  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    const absl::string_view answer = absl::StripAsciiWhitespace(item.answer());
    double want = 0;
    if (!absl::SimpleAtod(answer, &want) || !std::isfinite(want)) {
      return Result(v1::ERROR, config_.reward_wrong(),
                    absl::StrCat("answer ", Show(item.answer()), " is not a number"));
    }
    const std::optional<absl::string_view> text = FirstNumber(item.response());
    if (!text) {
      return Result(v1::UNPARSEABLE, config_.reward_unparseable(),
                    absl::StrCat("no number in the response; expected ", answer));
    }
    double got = 0;
    if (!absl::SimpleAtod(*text, &got)) {  // too many digits for a double
      got = (*text)[0] == '-' ? -std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::infinity();
    }
    const std::string detail =
        absl::StrCat("parsed ", Show(*text), ", expected ", answer,
                     config_.tolerance() > 0 ? absl::StrCat(" +/- ", config_.tolerance()) : "");
    if (std::fabs(got - want) <= config_.tolerance()) {
      return Result(v1::CORRECT, config_.reward_correct(), detail);
    }
    return Result(v1::WRONG, config_.reward_wrong(), detail);
  }

 private:
  v1::VerifierConfig config_;
};

}  // namespace

absl::Status RegisterBuiltinVerifiers(VerifierRegistry& registry) {
  absl::Status s = registry.Register(
      "exact_match",
      [](const v1::VerifierConfig& c) -> absl::StatusOr<std::unique_ptr<Verifier>> {
        return std::make_unique<ExactMatch>(c);
      });
  if (!s.ok()) return s;
  s = registry.Register(
      "numeric",
      [](const v1::VerifierConfig& c) -> absl::StatusOr<std::unique_ptr<Verifier>> {
        return std::make_unique<Numeric>(c);
      },
      internal::CheckTolerance);
  if (!s.ok()) return s;
  s = internal::RegisterAnswerVerifiers(registry);
  if (!s.ok()) return s;
  s = internal::RegisterSubprocessVerifier(registry);
  if (!s.ok()) return s;
  return internal::RegisterCodeExecVerifier(registry);
}

}  // namespace trellis::verifier
