#ifndef TRELLIS_VERIFIER_INTERNAL_RATIONAL_H_
#define TRELLIS_VERIFIER_INTERNAL_RATIONAL_H_

// Exact rational arithmetic on int64 (overflow-checked) and the arithmetic
// expression evaluator used by the countdown verifier. No eval, no shell.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trellis::verifier::internal {

// num / den in lowest terms, den > 0.
struct Rational {
  int64_t num = 0;
  int64_t den = 1;
  bool operator==(const Rational& o) const { return num == o.num && den == o.den; }
  std::string ToString() const;
};

// nullopt on int64 overflow or division by zero; `error` says which.
std::optional<Rational> MakeRational(int64_t num, int64_t den, std::string* error);
std::optional<Rational> Add(Rational a, Rational b, std::string* error);
std::optional<Rational> Sub(Rational a, Rational b, std::string* error);
std::optional<Rational> Mul(Rational a, Rational b, std::string* error);
std::optional<Rational> Div(Rational a, Rational b, std::string* error);

struct Evaluation {
  Rational value;
  // Every number literal of the expression, in order of appearance.
  std::vector<int64_t> literals;
};

// Parses and evaluates `expr`: non-negative integer literals, binary + - * /,
// parentheses and spaces (no unary minus). InvalidArgument for a syntax
// error (with the byte offset); OutOfRange for overflow or division by zero.
[[nodiscard]] absl::StatusOr<Evaluation> EvaluateExpression(absl::string_view expr);

}  // namespace trellis::verifier::internal

#endif  // TRELLIS_VERIFIER_INTERNAL_RATIONAL_H_
