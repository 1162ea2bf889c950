#ifndef TRELLIS_ACTOR_TESTING_ACTOR_CONFORMANCE_H_
#define TRELLIS_ACTOR_TESTING_ACTOR_CONFORMANCE_H_

// The conformance suite every binding of actor::RolloutWorker passes (the
// local actor, its gRPC client, the actor pool): the contracts of
// actor/rollout_worker.h on a small model. A binding's test compiles
// actor_conformance.cc into its own binary (GoogleTest registers tests
// through static initializers, which a static library would drop) and
// instantiates the suite with a factory:
//
//   INSTANTIATE_TEST_SUITE_P(Local, ActorConformanceTest,
//       ::testing::Values(ActorFactory{"local", MakeLocal}), ActorFactoryName);

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "actor/rollout_worker.h"
#include "gtest/gtest.h"
#include "text/tokenizer.h"
#include "trellis/v1/job.pb.h"
#include "weightsync/inprocess_transport.h"

namespace trellis::actor::conformance {

// What a binding builds its actor from; all of it outlives the actor.
struct ActorSetup {
  v1::ModelConfig model;  // model::testing::SmallConfig()
  const text::Tokenizer* tokenizer = nullptr;
  weightsync::Receiver* receiver = nullptr;  // what the suite publishes reaches it here
  std::string worker_id;
};

// The actor under test and what it needs alive (the engines behind a pool,
// a server and the engine it serves); `owned` outlives `worker`.
struct BoundActor {
  std::shared_ptr<void> owned;
  std::unique_ptr<RolloutWorker> worker;
};

struct ActorFactory {
  std::string name;
  std::function<absl::StatusOr<BoundActor>(const ActorSetup&)> make;
};

// For INSTANTIATE_TEST_SUITE_P: names each instance after its factory.
std::string ActorFactoryName(const ::testing::TestParamInfo<ActorFactory>& info);

class ActorConformanceTest : public ::testing::TestWithParam<ActorFactory> {
 protected:
  void SetUp() override;
  // Publishes weights for `version` (different for every version).
  void Publish(int64_t version);
  // `prompts` prompts (ids 10, 11, ...) of `length` tokens (BOS and
  // arithmetic characters), `n` responses each, sampled at temperature 1
  // with `seed`, up to 6 new tokens.
  v1::GenerateRequest Request(int prompts, int n, uint64_t seed, int length = 4) const;

  RolloutWorker& actor() { return *bound_.worker; }
  const text::Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  ActorSetup setup_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<weightsync::InProcessPublisher> publisher_;
  std::unique_ptr<weightsync::Receiver> receiver_;
  BoundActor bound_;
};

}  // namespace trellis::actor::conformance

#endif  // TRELLIS_ACTOR_TESTING_ACTOR_CONFORMANCE_H_
