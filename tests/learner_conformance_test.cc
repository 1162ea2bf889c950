// The learner conformance suite (learner/testing/learner_conformance.h)
// against every binding of learner::LearnerWorker: the local learner, its
// gRPC client talking to the Learner service served in this process, and a
// learner group of two data-parallel ranks (threads of this process).

#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "comm/tcp_store.h"
#include "learner/learner_service.h"
#include "learner/testing/learner_conformance.h"
#include "model/token_ids.h"
#include "roles/local_roles.h"
#include "rpc/channel.h"
#include "rpc/testing/in_process_server.h"
#include "scheduler/learner_group.h"
#include "tests/job_shapes.h"
#include "text/tokenizer.h"

namespace trellis::learner::conformance {
namespace {

const text::Tokenizer& CharTokenizer() {
  static const text::Tokenizer* tokenizer = text::NewCharTokenizer().release();
  return *tokenizer;
}

absl::StatusOr<BoundLearner> MakeLocal(const v1::JobConfig& job,
                                       weightsync::Publisher* publisher) {
  absl::StatusOr<std::unique_ptr<LearnerWorker>> learner =
      roles::MakeLocalLearner(job, CharTokenizer(), publisher, nullptr, "learner-0");
  if (!learner.ok()) return learner.status();
  return BoundLearner{nullptr, *std::move(learner)};
}

absl::StatusOr<BoundLearner> MakeGrpc(const v1::JobConfig& job,
                                      weightsync::Publisher* publisher) {
  absl::StatusOr<BoundLearner> engine = MakeLocal(job, publisher);
  if (!engine.ok()) return engine.status();
  std::shared_ptr<LearnerWorker> worker = std::move(engine->worker);
  auto service = std::make_shared<LearnerService>("learner-0");
  service->Bind(worker.get(),
                config::RequestLimitsFor(
                    job.model(), model::VocabSize(job.model(), CharTokenizer().vocab_size())),
                ::testing::TempDir());
  absl::StatusOr<std::shared_ptr<rpc::Server>> server =
      rpc::testing::ServeInProcess(service.get(), rpc::testing::KeepBoth(service, worker));
  if (!server.ok()) return server.status();
  return BoundLearner{*server,
                      NewGrpcLearnerClient(rpc::NewChannel((*server)->address()), "learner-0",
                                           absl::Seconds(60), ::testing::TempDir())};
}

// Two ranks joined on a free loopback port; rank 0 publishes.
absl::StatusOr<BoundLearner> MakeGroup(const v1::JobConfig& job,
                                       weightsync::Publisher* publisher) {
  constexpr int kRanks = 2;
  absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
  if (!port.ok()) return port.status();
  std::vector<absl::StatusOr<std::unique_ptr<LearnerWorker>>> ranks;
  for (int r = 0; r < kRanks; ++r) ranks.emplace_back(absl::UnknownError("not built"));
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      GroupMember member{r, kRanks, "127.0.0.1", *port, ""};
      ranks[r] = roles::MakeLocalLearner(job, CharTokenizer(), r == 0 ? publisher : nullptr,
                                             nullptr, "learner-" + std::to_string(r), member);
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::unique_ptr<LearnerWorker>> members;
  for (auto& rank : ranks) {
    if (!rank.ok()) return rank.status();
    members.push_back(*std::move(rank));
  }
  return BoundLearner{nullptr, scheduler::NewLearnerGroup(std::move(members))};
}

v1::JobConfig Job() {
  absl::StatusOr<v1::JobConfig> job = testing_util::TinyJobConfig();
  return job.ok() ? *job : v1::JobConfig();
}

INSTANTIATE_TEST_SUITE_P(Bindings, LearnerConformanceTest,
                         ::testing::Values(LearnerFactory{"local", Job(), MakeLocal},
                                           LearnerFactory{"grpc", Job(), MakeGrpc},
                                           LearnerFactory{"group", Job(), MakeGroup}),
                         LearnerFactoryName);

}  // namespace
}  // namespace trellis::learner::conformance
