#ifndef TRELLIS_VERIFIER_VERIFIER_H_
#define TRELLIS_VERIFIER_VERIFIER_H_

// Verifiers turn (prompt, response, ground truth) into a reward and a
// verdict. Built-ins and plugins register by name in a VerifierRegistry;
// the scheduler reaches them through a VerifierClient.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

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
  // One result per item, in order. The default calls Verify on each in turn
  // (an exception fails only its item, as ERROR); pools override it to
  // verify several items at once. Thread-safe where the verifier says so.
  virtual std::vector<v1::VerifyResult> VerifyBatch(
      const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items) const;
  // VerifyBatch, and what it took added to *stats (may be null). Only the
  // pool (verifier/pool.h) keeps stats; the default leaves *stats alone.
  virtual std::vector<v1::VerifyResult> VerifyBatchWithStats(
      const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items,
      v1::VerifierStats* stats) const {
    (void)stats;
    return VerifyBatch(items);
  }
  // True when one VerifyBatch call is far cheaper than a Verify per item
  // (one RPC per batch): the pool then hands it whole batches.
  virtual bool PrefersBatches() const { return false; }
  // How many Verify calls may run at once (the subprocess pool: its
  // workers); the pool calls Verify from that many threads.
  virtual int MaxConcurrency() const { return 1; }
};

using VerifierFactory = std::function<absl::StatusOr<std::unique_ptr<Verifier>>(
    const v1::VerifierConfig& config)>;
// What a kind requires of its config, checked without building anything (no
// process started, no connection made), so that a job is refused when it is
// prepared (loop::PrepareJob: `trellis resolve`, `plan` and `run` alike).
// InvalidArgument naming the field.
using VerifierCheck = std::function<absl::Status(const v1::VerifierConfig& config)>;

class VerifierRegistry {
 public:
  // AlreadyExists when `name` is taken. `check` (may be null) runs before
  // `factory`, and alone in Check.
  [[nodiscard]] absl::Status Register(const std::string& name, VerifierFactory factory,
                                      VerifierCheck check = nullptr);
  // InvalidArgument naming the registered verifiers when config.name is
  // unknown, else what the kind's check says.
  [[nodiscard]] absl::Status Check(const v1::VerifierConfig& config) const;
  // Check, then the kind's factory. The verifier comes wrapped in the pool
  // (verifier/pool.h: cache, circuit breaker, stats).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Verifier>> Create(
      const v1::VerifierConfig& config) const;
  bool Contains(const std::string& name) const;

 private:
  struct Kind {
    VerifierFactory factory;
    VerifierCheck check;
  };
  std::map<std::string, Kind> kinds_;
};

// Registers verifier kinds beyond the built-ins into a registry (the
// "remote" kind of verifier/verifier_service.h, which needs gRPC).
using VerifierKinds = std::function<absl::Status(VerifierRegistry&)>;
// Every later ProcessVerifiers offers `kinds` too. Called from main (and
// tests) before any job starts; not thread-safe.
void AddProcessVerifierKinds(VerifierKinds kinds);
// The built-ins and every kind added by AddProcessVerifierKinds: what a
// job's verifier.name may name in this process.
[[nodiscard]] absl::StatusOr<VerifierRegistry> ProcessVerifiers();

// exact_match: the trimmed response equals the trimmed answer.
// numeric: the first number in the response is within config.tolerance of
// the answer (UNPARSEABLE when the response holds no number).
// regex: config.pattern (ECMAScript) matches somewhere in the response.
// math: the last \boxed{...} of the response (nested braces allowed), else
// its last number, equals the answer (numerically within tolerance; plain
// text comparison without spaces when either side is not a number).
// countdown: the answer is "TARGET|N1,N2,..." or {"target": T, "numbers":
// [...]}; the response's expression (inside <answer>...</answer>, else its
// last line, before any '=') uses each number exactly once with + - * / and
// parentheses, and equals the target in exact rational arithmetic.
// subprocess: a pool of plugin processes speaking JSON lines, with a
// per-sample deadline (docs/verifier-plugins.md).
// code_exec: runs a Python program against JSON test cases in a sandbox
// (bubblewrap, rlimits; docs/verifier-plugins.md).
[[nodiscard]] absl::Status RegisterBuiltinVerifiers(VerifierRegistry& registry);

// How the scheduler's loop reaches verifiers (in-process or over gRPC).
class VerifierClient {
 public:
  virtual ~VerifierClient() = default;
  [[nodiscard]] virtual absl::StatusOr<v1::VerifyResponse> Verify(
      const v1::VerifyRequest& request) = 0;
};

// Verifies batches in this process with `verifier`; the response carries
// the verifier's stats when it keeps them (VerifyResponse.stats).
std::unique_ptr<VerifierClient> NewLocalVerifierClient(
    std::unique_ptr<Verifier> verifier);

}  // namespace trellis::verifier

#endif  // TRELLIS_VERIFIER_VERIFIER_H_
