#ifndef TRELLIS_VERIFIER_VERIFIER_H_
#define TRELLIS_VERIFIER_VERIFIER_H_

// Verifiers turn (prompt, response, ground truth) into a reward and a
// verdict. Built-ins and plugins register by name in a VerifierRegistry;
// the scheduler reaches them through a VerifierClient.

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::verifier {

class Verifier {
 public:
  virtual ~Verifier() = default;
  // Never fails as a call: a problem with the item is an ERROR verdict
  // whose detail says why.
  virtual v1::VerifyResult Verify(const v1::VerifyItem& item) const = 0;
};

using VerifierFactory = std::function<absl::StatusOr<std::unique_ptr<Verifier>>(
    const v1::VerifierConfig& config)>;

class VerifierRegistry {
 public:
  // AlreadyExists when `name` is taken.
  [[nodiscard]] absl::Status Register(const std::string& name,
                                      VerifierFactory factory);
  // NotFound naming the registered verifiers when config.name is unknown.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Verifier>> Create(
      const v1::VerifierConfig& config) const;
  bool Contains(const std::string& name) const;

 private:
  std::map<std::string, VerifierFactory> factories_;
};

// exact_match: the trimmed response equals the trimmed answer.
// numeric: the first number in the response is within config.tolerance of
// the answer (UNPARSEABLE when the response holds no number).
[[nodiscard]] absl::Status RegisterBuiltinVerifiers(VerifierRegistry& registry);

// How the scheduler's loop reaches verifiers (in-process or over gRPC).
class VerifierClient {
 public:
  virtual ~VerifierClient() = default;
  [[nodiscard]] virtual absl::StatusOr<v1::VerifyResponse> Verify(
      const v1::VerifyRequest& request) = 0;
};

// Verifies batches in this process with `verifier`.
std::unique_ptr<VerifierClient> NewLocalVerifierClient(
    std::unique_ptr<Verifier> verifier);

}  // namespace trellis::verifier

#endif  // TRELLIS_VERIFIER_VERIFIER_H_
