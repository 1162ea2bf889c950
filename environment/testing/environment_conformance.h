#ifndef TRELLIS_ENVIRONMENT_TESTING_ENVIRONMENT_CONFORMANCE_H_
#define TRELLIS_ENVIRONMENT_TESTING_ENVIRONMENT_CONFORMANCE_H_

// The conformance suite every Environment passes (the built-ins, plugins
// through "subprocess", the gRPC client): an episode opens, takes actions
// until done and closes, after which it is gone; an episode never opened
// is NotFound; equal seeds and actions give equal episodes; episodes run
// at once on several threads each go as they would alone. A test compiles
// environment_conformance.cc into its binary and instantiates the suite:
//
//   INSTANTIATE_TEST_SUITE_P(Builtins, EnvironmentConformanceTest,
//       ::testing::Values(EnvironmentCase{"guess_number", Make, item, policy}),
//       EnvironmentCaseName);

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "environment/environment.h"
#include "gtest/gtest.h"

namespace trellis::environment::conformance {

// A policy for one episode: the next action, given the last observation
// (the Open's before the first action). Stateful; one per episode.
using Policy = std::function<std::string(const std::string& observation)>;

struct EnvironmentCase {
  std::string name;
  // The environment under test, fresh for each test.
  std::function<absl::StatusOr<std::unique_ptr<Environment>>()> make;
  // The item episodes are opened for; the suite sets episode_id and seed.
  v1::OpenEpisodeRequest item;
  // A new policy that ends every episode (done) within max_turns actions.
  std::function<Policy()> policy;
  int max_turns = 12;
};

std::string EnvironmentCaseName(const ::testing::TestParamInfo<EnvironmentCase>& info);

class EnvironmentConformanceTest : public ::testing::TestWithParam<EnvironmentCase> {
 protected:
  void SetUp() override;
  Environment& env() { return *env_; }

 private:
  std::unique_ptr<Environment> env_;
};

}  // namespace trellis::environment::conformance

#endif  // TRELLIS_ENVIRONMENT_TESTING_ENVIRONMENT_CONFORMANCE_H_
