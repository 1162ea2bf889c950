#include "verifier/internal/rational.h"

#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace trellis::verifier::internal {

std::string Rational::ToString() const {
  return den == 1 ? absl::StrCat(num) : absl::StrCat(num, "/", den);
}

std::optional<Rational> MakeRational(int64_t num, int64_t den, std::string* error) {
  if (den == 0) {
    *error = "division by zero";
    return std::nullopt;
  }
  if (num == INT64_MIN || den == INT64_MIN) {
    *error = "integer overflow";
    return std::nullopt;
  }
  if (den < 0) {
    num = -num;
    den = -den;
  }
  const int64_t g = std::gcd(num, den);
  return Rational{num / g, den / g};
}

namespace {

std::optional<Rational> Overflow(std::string* error) {
  *error = "integer overflow";
  return std::nullopt;
}

}  // namespace

std::optional<Rational> Add(Rational a, Rational b, std::string* error) {
  int64_t x, y, n, d;
  if (__builtin_mul_overflow(a.num, b.den, &x) || __builtin_mul_overflow(b.num, a.den, &y) ||
      __builtin_add_overflow(x, y, &n) || __builtin_mul_overflow(a.den, b.den, &d)) {
    return Overflow(error);
  }
  return MakeRational(n, d, error);
}

std::optional<Rational> Sub(Rational a, Rational b, std::string* error) {
  if (b.num == INT64_MIN) return Overflow(error);
  return Add(a, Rational{-b.num, b.den}, error);
}

std::optional<Rational> Mul(Rational a, Rational b, std::string* error) {
  int64_t n, d;
  if (__builtin_mul_overflow(a.num, b.num, &n) || __builtin_mul_overflow(a.den, b.den, &d)) {
    return Overflow(error);
  }
  return MakeRational(n, d, error);
}

std::optional<Rational> Div(Rational a, Rational b, std::string* error) {
  if (b.num == 0) {
    *error = "division by zero";
    return std::nullopt;
  }
  return Mul(a, Rational{b.den, b.num}, error);  // MakeRational fixes the sign
}

namespace {

// expr   := term (('+' | '-') term)*
// term   := factor (('*' | '/') factor)*
// factor := INTEGER | '(' expr ')'
class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<Evaluation> Run() {
    absl::StatusOr<Rational> v = Expr(0);
    if (!v.ok()) return v.status();
    SkipSpaces();
    if (pos_ != text_.size()) return Syntax("unexpected character");
    return Evaluation{*v, std::move(literals_)};
  }

 private:
  static constexpr int kMaxDepth = 64;

  void SkipSpaces() {
    while (pos_ < text_.size() && absl::ascii_isspace(text_[pos_])) ++pos_;
  }
  absl::Status Syntax(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " at offset ", pos_,
        pos_ < text_.size() ? absl::StrCat(" ('", text_.substr(pos_, 1), "')") : " (end)"));
  }
  absl::StatusOr<Rational> Apply(char op, Rational a, Rational b) {
    std::string error;
    std::optional<Rational> r = op == '+'   ? Add(a, b, &error)
                                : op == '-' ? Sub(a, b, &error)
                                : op == '*' ? Mul(a, b, &error)
                                            : Div(a, b, &error);
    if (!r) return absl::OutOfRangeError(error);
    return *r;
  }

  absl::StatusOr<Rational> Expr(int depth) {
    if (depth > kMaxDepth) return Syntax("parentheses nested too deeply");
    absl::StatusOr<Rational> acc = Term(depth);
    while (acc.ok()) {
      SkipSpaces();
      if (pos_ == text_.size() || (text_[pos_] != '+' && text_[pos_] != '-')) break;
      const char op = text_[pos_++];
      absl::StatusOr<Rational> rhs = Term(depth);
      if (!rhs.ok()) return rhs;
      acc = Apply(op, *acc, *rhs);
    }
    return acc;
  }

  absl::StatusOr<Rational> Term(int depth) {
    absl::StatusOr<Rational> acc = Factor(depth);
    while (acc.ok()) {
      SkipSpaces();
      if (pos_ == text_.size() || (text_[pos_] != '*' && text_[pos_] != '/')) break;
      const char op = text_[pos_++];
      absl::StatusOr<Rational> rhs = Factor(depth);
      if (!rhs.ok()) return rhs;
      acc = Apply(op, *acc, *rhs);
    }
    return acc;
  }

  absl::StatusOr<Rational> Factor(int depth) {
    SkipSpaces();
    if (pos_ == text_.size()) return Syntax("expected a number or '('");
    if (text_[pos_] == '(') {
      ++pos_;
      absl::StatusOr<Rational> inner = Expr(depth + 1);
      if (!inner.ok()) return inner;
      SkipSpaces();
      if (pos_ == text_.size() || text_[pos_] != ')') return Syntax("expected ')'");
      ++pos_;
      return inner;
    }
    if (!absl::ascii_isdigit(text_[pos_])) return Syntax("expected a number or '('");
    int64_t value = 0;
    while (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_])) {
      if (__builtin_mul_overflow(value, 10, &value) ||
          __builtin_add_overflow(value, text_[pos_] - '0', &value)) {
        return absl::OutOfRangeError("integer overflow in a number literal");
      }
      ++pos_;
    }
    literals_.push_back(value);
    return Rational{value, 1};
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::vector<int64_t> literals_;
};

}  // namespace

absl::StatusOr<Evaluation> EvaluateExpression(absl::string_view expr) {
  return Parser(expr).Run();
}

}  // namespace trellis::verifier::internal
