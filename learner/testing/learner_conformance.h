#ifndef TRELLIS_LEARNER_TESTING_LEARNER_CONFORMANCE_H_
#define TRELLIS_LEARNER_TESTING_LEARNER_CONFORMANCE_H_

// The conformance suite every binding of learner::LearnerWorker passes (the
// local learner, its gRPC client, the learner group): the contracts of
// learner/learner_worker.h. A binding's test compiles learner_conformance.cc
// into its own binary and instantiates the suite:
//
//   INSTANTIATE_TEST_SUITE_P(Bindings, LearnerConformanceTest,
//       ::testing::Values(LearnerFactory{"local", job, MakeLocal}),
//       LearnerFactoryName);

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "learner/learner_worker.h"
#include "text/tokenizer.h"
#include "trellis/v1/job.pb.h"
#include "weightsync/inprocess_transport.h"

namespace trellis::learner::conformance {

// The learner under test and what it needs alive (a server and the engine
// it serves, the ranks of a group); `owned` outlives `worker`.
struct BoundLearner {
  std::shared_ptr<void> owned;
  std::unique_ptr<LearnerWorker> worker;
};

struct LearnerFactory {
  std::string name;
  // A GRPO job with a small model (tests/tiny_job.h), its vocabulary the
  // character tokenizer's (model.vocab_size 0).
  v1::JobConfig job;
  // A fresh learner for `job` (worker id "learner-0") publishing to
  // `publisher`, which outlives it.
  std::function<absl::StatusOr<BoundLearner>(const v1::JobConfig& job,
                                             weightsync::Publisher* publisher)>
      make;
};

// For INSTANTIATE_TEST_SUITE_P: names each instance after its factory.
std::string LearnerFactoryName(const ::testing::TestParamInfo<LearnerFactory>& info);

class LearnerConformanceTest : public ::testing::TestWithParam<LearnerFactory> {
 protected:
  void SetUp() override;

  // Batches of arithmetic pairs; `salt` varies their content.
  v1::SftBatch Sft(int salt) const;
  v1::TrainBatch Train(int salt) const;
  v1::PreferenceBatch Preference(int salt) const;
  std::string TempPath(const std::string& name) const;

  LearnerWorker& learner() { return *bound_.worker; }
  weightsync::Receiver& receiver() { return *receiver_; }
  const text::Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::vector<int32_t> Ids(const std::string& text) const;

  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<weightsync::InProcessPublisher> publisher_;
  std::unique_ptr<weightsync::Receiver> receiver_;
  BoundLearner bound_;
};

}  // namespace trellis::learner::conformance

#endif  // TRELLIS_LEARNER_TESTING_LEARNER_CONFORMANCE_H_
