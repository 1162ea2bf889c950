#ifndef TRELLIS_WEIGHTSYNC_TESTING_TRANSPORT_CONFORMANCE_H_
#define TRELLIS_WEIGHTSYNC_TESTING_TRANSPORT_CONFORMANCE_H_

// The conformance suite every weight transport (a Publisher and its
// Receiver) passes.
//
// A transport's test compiles transport_conformance.cc into its own test
// binary (GoogleTest registers tests through static initializers, which a
// static library would drop) and instantiates the suite with a factory:
//
//   INSTANTIATE_TEST_SUITE_P(InProcess, TransportConformanceTest,
//       ::testing::Values(TransportFactory{"inprocess", MakeEnds, CorruptStaged}),
//       TransportFactoryName);

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "weightsync/registry.h"
#include "weightsync/transport.h"

namespace trellis::weightsync::conformance {

// The two ends of one channel.
struct TransportEnds {
  std::shared_ptr<Publisher> publisher;
  std::shared_ptr<Receiver> receiver;
};

struct TransportFactory {
  std::string name;
  // Makes fresh, connected ends with `options` (bucket_bytes set; the
  // factory fills in the address).
  std::function<absl::StatusOr<TransportEnds>(const TransportOptions&)> make;
  // Damages one byte of bucket `bucket` of the newest published version as
  // the receiver will see it. Null when the transport cannot inject that
  // fault: the corruption tests then skip.
  std::function<absl::Status(TransportEnds&, int bucket)> corrupt;
  // Why the transport cannot run on this machine (no GPU, say), or empty.
  // Null means it always can. Every test skips with this reason.
  std::function<std::string()> unavailable;
};

// Both ends of transport `name` from `registry`, as the role factories make
// them.
absl::StatusOr<TransportEnds> MakeByName(const TransportRegistry& registry, absl::string_view name,
                                         const TransportOptions& options);

// `corrupt` for every publisher that stages its versions
// (internal/inprocess_testing.h).
absl::Status CorruptStaged(TransportEnds& ends, int bucket);

// For INSTANTIATE_TEST_SUITE_P: names each instance after its factory.
std::string TransportFactoryName(const ::testing::TestParamInfo<TransportFactory>& info);

class TransportConformanceTest : public ::testing::TestWithParam<TransportFactory> {
 protected:
  void SetUp() override;
  // Fails the test (and returns empty ends) if the factory fails.
  TransportEnds Make(int64_t bucket_bytes);
};

}  // namespace trellis::weightsync::conformance

#endif  // TRELLIS_WEIGHTSYNC_TESTING_TRANSPORT_CONFORMANCE_H_
