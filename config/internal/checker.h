#ifndef TRELLIS_CONFIG_INTERNAL_CHECKER_H_
#define TRELLIS_CONFIG_INTERNAL_CHECKER_H_

// Collects a job's violations, each as "<field path>: must be <rule>,
// found <value>" (config/job_validate.cc, config/job_limits.cc). Every
// comparison is written so that NaN fails it, and a floating-point value
// must also be finite: .inf passes no rule.

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trellis::config::internal {

class Checker {
 public:
  template <typename T>
  void Require(bool ok, const std::string& path, const std::string& rule, T found) {
    if (!ok) errors_.push_back(absl::StrCat(path, ": must be ", rule, ", found ", found));
  }
  template <typename T>
  void Positive(const std::string& path, T v) {
    Require(IsFinite(v) && v > 0, path, "> 0", v);
  }
  template <typename T>
  void NonNegative(const std::string& path, T v) {
    Require(IsFinite(v) && v >= 0, path, ">= 0", v);
  }
  template <typename T>
  void AtLeast(const std::string& path, T v, T lo) {
    Require(v >= lo, path, absl::StrCat(">= ", lo), v);
  }
  // lo <= v <= hi.
  template <typename T>
  void Within(const std::string& path, T v, T lo, T hi) {
    Require(IsFinite(v) && v >= lo && v <= hi, path, absl::StrCat("in [", lo, ", ", hi, "]"), v);
  }
  // 0 < v <= hi.
  template <typename T>
  void PositiveAtMost(const std::string& path, T v, T hi) {
    Require(IsFinite(v) && v > 0 && v <= hi, path, absl::StrCat("in (0, ", hi, "]"), v);
  }
  // lo < v < hi.
  void OpenUnit(const std::string& path, double v) {
    Require(v > 0 && v < 1, path, "in (0, 1)", v);
  }
  // Each of `items` once: one violation for the whole list, naming its
  // first repeated item (shown by name(item)), where it was first, and how
  // many entries repeat an earlier one, so that a long list costs one
  // message and linear time.
  template <typename T, typename Name>
  void Distinct(const std::string& path, const std::vector<T>& items, Name name) {
    absl::flat_hash_map<T, size_t> first;
    size_t repeats = 0, at = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      auto [it, inserted] = first.emplace(items[i], i);
      if (inserted) continue;
      if (repeats++ == 0) at = i;
    }
    if (repeats == 0) return;
    errors_.push_back(absl::StrCat(path, "[", at, "]: must name each entry once, found ",
                                   name(items[at]), " again (first at [", first[items[at]], "]; ",
                                   repeats, repeats == 1 ? " entry repeats" : " entries repeat",
                                   " an earlier one)"));
  }
  // A finite number (not NaN, not +-inf).
  void Finite(const std::string& path, double v) {
    Require(std::isfinite(v), path, "a finite number", v);
  }

  absl::Status status() const {
    if (errors_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(errors_, "; "));
  }

 private:
  template <typename T>
  static bool IsFinite(T v) {
    if constexpr (std::is_floating_point_v<T>) return std::isfinite(v);
    return true;
  }

  std::vector<std::string> errors_;
};

}  // namespace trellis::config::internal

#endif  // TRELLIS_CONFIG_INTERNAL_CHECKER_H_
