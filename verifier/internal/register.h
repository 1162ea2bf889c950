#ifndef TRELLIS_VERIFIER_INTERNAL_REGISTER_H_
#define TRELLIS_VERIFIER_INTERNAL_REGISTER_H_

// Registration of each group of built-ins; RegisterBuiltinVerifiers calls
// them all.

#include "absl/status/status.h"
#include "verifier/verifier.h"

namespace trellis::verifier::internal {

// numeric's and math's check: verifier.tolerance finite and >= 0
// (answers.cc).
[[nodiscard]] absl::Status CheckTolerance(const v1::VerifierConfig& c);
// regex, math, countdown (answers.cc).
[[nodiscard]] absl::Status RegisterAnswerVerifiers(VerifierRegistry& registry);
// subprocess (subprocess.cc).
[[nodiscard]] absl::Status RegisterSubprocessVerifier(VerifierRegistry& registry);
// code_exec (code_exec.cc).
[[nodiscard]] absl::Status RegisterCodeExecVerifier(VerifierRegistry& registry);

}  // namespace trellis::verifier::internal

#endif  // TRELLIS_VERIFIER_INTERNAL_REGISTER_H_
