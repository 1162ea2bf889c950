#ifndef TRELLIS_VERIFIER_INTERNAL_RESULT_H_
#define TRELLIS_VERIFIER_INTERNAL_RESULT_H_

// Small helpers shared by the verifier implementations.

#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::verifier::internal {

// `s` quoted and C-escaped for a detail message, shortened when long.
inline std::string Show(absl::string_view s) {
  constexpr size_t kMax = 60;
  const bool cut = s.size() > kMax;
  return absl::StrCat("\"", absl::CEscape(s.substr(0, kMax)), cut ? "...\"" : "\"");
}

inline v1::VerifyResult Result(v1::Verdict verdict, float reward, std::string detail) {
  v1::VerifyResult r;
  r.set_verdict(verdict);
  r.set_reward(reward);
  r.set_detail(std::move(detail));
  return r;
}

// A failure Trellis made (ERROR or TIMEOUT) and why.
inline v1::VerifyResult Failed(v1::Verdict verdict, float reward, std::string detail,
                               v1::VerifyResult::Failure failure) {
  v1::VerifyResult r = Result(verdict, reward, std::move(detail));
  r.set_failure(failure);
  return r;
}

}  // namespace trellis::verifier::internal

#endif  // TRELLIS_VERIFIER_INTERNAL_RESULT_H_
