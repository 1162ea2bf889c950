// The built-in arithmetic task: "12+7=" → "19", "3-45=" → "-42".

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "data/internal/random.h"

namespace trellis::data {
namespace {

// Small problem spaces (1-digit operands) run out of distinct prompts; stop
// drawing after this many attempts per requested problem.
constexpr int64_t kAttemptsPerProblem = 10;
constexpr int64_t kExtraAttempts = 1000;

int64_t Pow10(int n) {
  int64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

// An operand whose digit count is uniform in [min_digits, max_digits];
// 1-digit operands include 0.
int64_t DrawOperand(std::mt19937_64& rng, int min_digits, int max_digits) {
  const int digits = static_cast<int>(internal::UniformInt(rng, min_digits, max_digits));
  const int64_t lo = digits == 1 ? 0 : Pow10(digits - 1);
  const int64_t hi = Pow10(digits) - 1;
  return lo + static_cast<int64_t>(internal::UniformInt(rng, 0, hi - lo));
}

}  // namespace

Split GenerateArithmetic(const v1::ArithmeticTaskConfig& config, uint64_t seed) {
  // ValidateJob enforces these; clamp anyway so a bad config cannot loop or
  // overflow.
  const int min_digits = std::clamp(config.min_digits(), 1, 9);
  const int max_digits = std::clamp(config.max_digits(), min_digits, 9);
  std::string ops;
  for (char c : config.operators()) {
    if (c == '+' || c == '-') ops += c;
  }
  const int64_t wanted = std::max(config.num_problems(), 0);
  Split split;
  if (ops.empty() || wanted == 0) return split;

  std::mt19937_64 rng(seed);
  std::vector<Example> problems;
  std::unordered_set<std::string> seen;
  const int64_t max_attempts = wanted * kAttemptsPerProblem + kExtraAttempts;
  for (int64_t attempt = 0;
       attempt < max_attempts && static_cast<int64_t>(problems.size()) < wanted; ++attempt) {
    const int64_t a = DrawOperand(rng, min_digits, max_digits);
    const char op = ops[internal::UniformInt(rng, 0, ops.size() - 1)];
    const int64_t b = DrawOperand(rng, min_digits, max_digits);
    std::string prompt = absl::StrCat(a, std::string(1, op), b, "=");
    if (!seen.insert(prompt).second) continue;
    Example ex;
    ex.id = problems.size();
    ex.prompt = std::move(prompt);
    ex.answer = absl::StrCat(op == '+' ? a + b : a - b);
    problems.push_back(std::move(ex));
  }

  internal::Shuffle(problems, rng);
  const size_t n = problems.size();
  size_t n_eval = 0;
  if (n >= 2) {
    const double frac = config.eval_fraction();
    const double want = frac > 0 ? std::round(std::min(frac, 1.0) * n) : 0;
    n_eval = std::clamp<size_t>(static_cast<size_t>(want), 1, n - 1);
  }
  split.eval.assign(problems.begin(), problems.begin() + n_eval);
  split.train.assign(problems.begin() + n_eval, problems.end());
  return split;
}

std::vector<PreferencePair> ArithmeticPreferences(const std::vector<Example>& examples,
                                                  uint64_t seed) {
  std::mt19937_64 rng(internal::Mix(seed));
  std::vector<PreferencePair> pairs;
  pairs.reserve(examples.size());
  for (const Example& ex : examples) {
    int64_t answer = 0;
    if (!absl::SimpleAtoi(ex.answer, &answer)) continue;  // not an arithmetic example
    // Half are near misses, 1 to 9 away either side; half run on past the
    // answer by one digit (a response that did not stop).
    std::string wrong;
    if (internal::UniformInt(rng, 0, 1) == 0) {
      const int64_t offset = static_cast<int64_t>(internal::UniformInt(rng, 1, 9));
      wrong = absl::StrCat(internal::UniformInt(rng, 0, 1) == 0 ? answer - offset
                                                                : answer + offset);
    } else {
      wrong = absl::StrCat(ex.answer, internal::UniformInt(rng, 0, 9));
    }
    pairs.push_back({ex.id, ex.prompt, ex.answer, std::move(wrong), ex.metadata_json});
  }
  return pairs;
}

}  // namespace trellis::data
