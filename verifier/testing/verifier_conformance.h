#ifndef TRELLIS_VERIFIER_TESTING_VERIFIER_CONFORMANCE_H_
#define TRELLIS_VERIFIER_TESTING_VERIFIER_CONFORMANCE_H_

// The conformance suite every binding of verifier::VerifierClient passes
// (the local client, the gRPC client of a Verifier service, the pool, the
// "remote" verifier): one result per item, in order; a problem with an item
// is that item's ERROR verdict, never a failed call. A binding's test
// compiles verifier_conformance.cc into its own binary and instantiates
// the suite:
//
//   INSTANTIATE_TEST_SUITE_P(Bindings, VerifierConformanceTest,
//       ::testing::Values(VerifierFactory{"local", MakeLocal}),
//       VerifierFactoryName);

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "verifier/verifier.h"

namespace trellis::verifier::conformance {

// The client under test and what it needs alive (a service and its
// server); `owned` outlives `client`.
struct BoundVerifier {
  std::shared_ptr<void> owned;
  std::unique_ptr<VerifierClient> client;
};

struct VerifierFactory {
  std::string name;
  // A client whose verdicts are those of `inner` (thread-safe), the
  // suite's verifier: CORRECT (reward 1) when the response equals the
  // answer, UNPARSEABLE (reward 0) when it is empty, WRONG (reward 0)
  // otherwise; it throws std::runtime_error("boom") on the response "throw".
  std::function<absl::StatusOr<BoundVerifier>(std::unique_ptr<Verifier> inner)> make;
};

// For INSTANTIATE_TEST_SUITE_P: names each instance after its factory.
std::string VerifierFactoryName(const ::testing::TestParamInfo<VerifierFactory>& info);

class VerifierConformanceTest : public ::testing::TestWithParam<VerifierFactory> {
 protected:
  void SetUp() override;
  VerifierClient& client() { return *bound_.client; }

 private:
  BoundVerifier bound_;
};

}  // namespace trellis::verifier::conformance

#endif  // TRELLIS_VERIFIER_TESTING_VERIFIER_CONFORMANCE_H_
