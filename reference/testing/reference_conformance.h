#ifndef TRELLIS_REFERENCE_TESTING_REFERENCE_CONFORMANCE_H_
#define TRELLIS_REFERENCE_TESTING_REFERENCE_CONFORMANCE_H_

// The conformance suite every binding of reference::ReferenceWorker passes
// (the local reference, its gRPC client): the contracts of
// reference/reference_worker.h. A binding's test compiles
// reference_conformance.cc into its own binary and instantiates the suite:
//
//   INSTANTIATE_TEST_SUITE_P(Bindings, ReferenceConformanceTest,
//       ::testing::Values(ReferenceFactory{"local", job, MakeLocal}),
//       ReferenceFactoryName);

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "reference/reference_worker.h"
#include "text/tokenizer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::reference::conformance {

// The reference under test and what it needs alive (a server and the
// engine it serves); `owned` outlives `worker`.
struct BoundReference {
  std::shared_ptr<void> owned;
  std::unique_ptr<ReferenceWorker> worker;
};

struct ReferenceFactory {
  std::string name;
  // A job without a reward model, its model small (tests/tiny_job.h) and
  // its vocabulary the tokenizer's (model.vocab_size 0).
  v1::JobConfig job;
  // A fresh reference for `job` with `tokenizer` (which outlives it), its
  // worker id "reference-0".
  std::function<absl::StatusOr<BoundReference>(const v1::JobConfig& job,
                                               const text::Tokenizer* tokenizer)>
      make;
};

// For INSTANTIATE_TEST_SUITE_P: names each instance after its factory.
std::string ReferenceFactoryName(const ::testing::TestParamInfo<ReferenceFactory>& info);

class ReferenceConformanceTest : public ::testing::TestWithParam<ReferenceFactory> {
 protected:
  void SetUp() override;
  // Loads weights the suite wrote for the job's model.
  void Load();
  // A sample of the prompt "1+2=" (after BOS) and `response`.
  v1::Sample Sample(const std::string& response) const;

  ReferenceWorker& reference() { return *bound_.worker; }
  const v1::JobConfig& job() const { return GetParam().job; }

 private:
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::string weights_path_;
  BoundReference bound_;
};

}  // namespace trellis::reference::conformance

#endif  // TRELLIS_REFERENCE_TESTING_REFERENCE_CONFORMANCE_H_
