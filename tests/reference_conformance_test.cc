// The reference conformance suite (reference/testing/reference_conformance.h)
// against every binding of reference::ReferenceWorker: the local reference
// and its gRPC client talking to the Reference service served in this
// process. (The reference has no pool.)

#include <memory>
#include <utility>

#include "reference/reference_service.h"
#include "reference/testing/reference_conformance.h"
#include "rpc/channel.h"
#include "rpc/testing/in_process_server.h"
#include "tests/job_shapes.h"

namespace trellis::reference::conformance {
namespace {

absl::StatusOr<BoundReference> MakeLocal(const v1::JobConfig& job,
                                         const text::Tokenizer* tokenizer) {
  absl::StatusOr<std::unique_ptr<ReferenceWorker>> reference =
      NewLocalReference(job, tokenizer, nullptr);
  if (!reference.ok()) return reference.status();
  return BoundReference{nullptr, *std::move(reference)};
}

absl::StatusOr<BoundReference> MakeGrpc(const v1::JobConfig& job,
                                        const text::Tokenizer* tokenizer) {
  absl::StatusOr<BoundReference> engine = MakeLocal(job, tokenizer);
  if (!engine.ok()) return engine.status();
  std::shared_ptr<ReferenceWorker> worker = std::move(engine->worker);
  auto service = std::make_shared<ReferenceService>("reference-0");
  service->Bind(worker.get(), config::RequestLimitsFor(job.model(), tokenizer->vocab_size()),
                ::testing::TempDir());
  absl::StatusOr<std::shared_ptr<rpc::Server>> server =
      rpc::testing::ServeInProcess(service.get(), rpc::testing::KeepBoth(service, worker));
  if (!server.ok()) return server.status();
  return BoundReference{*server,
                        NewGrpcReferenceClient(rpc::NewChannel((*server)->address()), "reference-0",
                                               absl::Seconds(30), ::testing::TempDir())};
}

v1::JobConfig Job() {
  absl::StatusOr<v1::JobConfig> job = testing_util::TinyJobConfig();
  return job.ok() ? *job : v1::JobConfig();
}

INSTANTIATE_TEST_SUITE_P(Bindings, ReferenceConformanceTest,
                         ::testing::Values(ReferenceFactory{"local", Job(), MakeLocal},
                                           ReferenceFactory{"grpc", Job(), MakeGrpc}),
                         ReferenceFactoryName);

}  // namespace
}  // namespace trellis::reference::conformance
