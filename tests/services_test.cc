// Malformed calls to the role and scheduler services get INVALID_ARGUMENT
// or FAILED_PRECONDITION with a message naming the field, and the service
// keeps serving: the next good call succeeds.

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "actor/actor_service.h"
#include "actor/torch_guard.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/ledger_forwarder.h"
#include "learner/learner_service.h"
#include "ledger/ledger.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "model/token_ids.h"
#include "reference/reference_service.h"
#include "roles/local_roles.h"
#include "rpc/channel.h"
#include "rpc/server.h"
#include "scheduler/scheduler_service.h"
#include "tests/tiny_job.h"
#include "text/tokenizer.h"
#include "weightsync/inprocess_transport.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

template <typename Response>
absl::Status StatusOf(const absl::StatusOr<Response>& r) {
  return r.status();
}

class ServicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = testing_util::TinyJob();
    tokenizer_ = text::NewCharTokenizer();
    publisher_ = weightsync::NewInProcessPublisher();
    receiver_ = publisher_->NewReceiver();
    absl::StatusOr<std::unique_ptr<learner::LearnerWorker>> learner =
        roles::MakeLocalLearner(job_, *tokenizer_, publisher_.get(), nullptr, "learner-0");
    ASSERT_TRUE(learner.ok()) << learner.status();
    learner_ = *std::move(learner);
    absl::StatusOr<std::unique_ptr<actor::RolloutWorker>> actor =
        roles::MakeLocalActor(job_, tokenizer_.get(), receiver_.get(), nullptr, "actor-0");
    ASSERT_TRUE(actor.ok()) << actor.status();
    actor_ = *std::move(actor);
    const int64_t vocab = model::VocabSize(job_.model(), tokenizer_->vocab_size());
    learner_service_.Bind(learner_.get(), config::RequestLimitsFor(job_.model(), vocab),
                          ::testing::TempDir());
    actor_service_.Bind(actor_.get(), config::RequestLimitsFor(job_.model(), vocab));
    ASSERT_TRUE(scheduler_service_.SetJob(job_).ok());
    absl::StatusOr<std::unique_ptr<rpc::Server>> server = rpc::Server::Start(
        "127.0.0.1:0", {&learner_service_, &actor_service_, &scheduler_service_});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = rpc::NewChannel(server_->address());
  }

  std::vector<int32_t> Ids(const std::string& text) { return *tokenizer_->Encode(text); }

  v1::SftBatch GoodSftBatch() {
    v1::SftBatch batch;
    auto* pair = batch.add_pairs();
    for (int id : Ids("1+2=")) pair->add_prompt_tokens(id);
    for (int id : Ids("3")) pair->add_target_tokens(id);
    return batch;
  }

  v1::JobConfig job_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<weightsync::InProcessPublisher> publisher_;
  std::unique_ptr<weightsync::Receiver> receiver_;
  std::unique_ptr<learner::LearnerWorker> learner_;
  std::unique_ptr<actor::RolloutWorker> actor_;
  learner::LearnerService learner_service_{"learner-0"};
  actor::ActorService actor_service_{"actor-0"};
  scheduler::SchedulerService scheduler_service_{absl::Seconds(1)};
  std::unique_ptr<rpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ServicesTest, LearnerRefusesMalformedBatchesAndKeepsServing) {
  auto learner =
      learner::NewGrpcLearnerClient(channel_, "learner-0", absl::Seconds(30), ::testing::TempDir());

  absl::Status empty = StatusOf(learner->SftStep(v1::SftBatch()));
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(empty.message()), HasSubstr("empty batch"));

  v1::SftBatch bad_ids = GoodSftBatch();
  bad_ids.mutable_pairs(0)->set_target_tokens(0, 100000);
  absl::Status out_of_vocab = StatusOf(learner->SftStep(bad_ids));
  EXPECT_EQ(out_of_vocab.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out_of_vocab.message()), HasSubstr("pairs[0].target_tokens[0] = 100000"));

  v1::TrainBatch wrong_shapes;
  v1::TrainSample* s = wrong_shapes.add_samples();
  s->add_prompt_tokens(1);
  s->add_response_tokens(2);
  s->add_response_tokens(3);
  s->add_old_logprobs(-0.5f);  // One log-prob for two tokens.
  absl::Status shapes = StatusOf(learner->TrainStep(wrong_shapes));
  EXPECT_EQ(shapes.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(shapes.message()), HasSubstr("train sample 0 has 2 response tokens"));

  absl::Status no_path = learner->SaveWeights("");
  EXPECT_EQ(no_path.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_path.message()), HasSubstr("path"));

  absl::StatusOr<v1::TrainStats> good = learner->SftStep(GoodSftBatch());
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_GT(good->loss(), 0);
}

TEST_F(ServicesTest, ActorRefusesBadPromptsAndCallsInTheWrongState) {
  auto actor = actor::NewGrpcActorClient(channel_, "actor-0", absl::Seconds(30));
  v1::GenerateRequest request;
  request.set_responses_per_prompt(2);
  request.mutable_sampling()->set_max_new_tokens(4);
  request.mutable_sampling()->set_temperature(1);
  v1::Prompt* prompt = request.add_prompts();
  prompt->set_id(7);
  for (int id : Ids("1+2=")) prompt->add_token_ids(id);

  // No weights yet.
  absl::Status early = StatusOf(actor->Generate(request));
  EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(early.message()), HasSubstr("before any weights"));

  ASSERT_TRUE(learner_->PublishWeights().ok());
  ASSERT_TRUE(actor->SyncWeights(0).ok());

  v1::GenerateRequest negative = request;
  negative.mutable_prompts(0)->set_token_ids(1, -3);
  absl::Status bad = StatusOf(actor->Generate(negative));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("prompts[0].token_ids[1] = -3"));

  v1::GenerateRequest no_tokens = request;
  no_tokens.mutable_sampling()->set_max_new_tokens(0);
  EXPECT_EQ(StatusOf(actor->Generate(no_tokens)).code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<v1::GenerateResponse> good = actor->Generate(request);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->samples_size(), 2);

  // A version the learner will never publish is refused at once instead of
  // holding the actor for its sync timeout (60 s, which would fail the
  // client's 30 s deadline with DEADLINE_EXCEEDED).
  absl::Status ahead = StatusOf(actor->SyncWeights(int64_t{1} << 40));
  EXPECT_EQ(ahead.code(), absl::StatusCode::kFailedPrecondition) << ahead;
  EXPECT_THAT(std::string(ahead.message()), HasSubstr("will never be published"));
  EXPECT_TRUE(actor->Generate(request).ok());
}

TEST_F(ServicesTest, SchedulerRefusesUnknownJobsAndMalformedReports) {
  auto stub = v1::Scheduler::NewStub(channel_);
  v1::JobStatusRequest unknown;
  unknown.set_job_id("no-such-job");
  absl::Status status = StatusOf(rpc::Call(*stub, &v1::Scheduler::Stub::GetJobStatus, unknown,
                                           absl::Seconds(5), "scheduler"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("unknown job 'no-such-job'"));

  v1::JobConfig second = job_;
  absl::Status busy = StatusOf(rpc::Call(*stub, &v1::Scheduler::Stub::SubmitJob, second,
                                         absl::Seconds(5), "scheduler"));
  EXPECT_EQ(busy.code(), absl::StatusCode::kFailedPrecondition);

  v1::RegisterRequest no_address;
  no_address.set_role(v1::ACTOR);
  absl::Status reg = StatusOf(rpc::Call(*stub, &v1::Scheduler::Stub::Register, no_address,
                                        absl::Seconds(5), "scheduler"));
  EXPECT_EQ(reg.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(reg.message()), HasSubstr("address"));

  v1::LedgerReport report;
  report.set_worker_id("actor-0");
  report.add_records()->mutable_object()->set_object("unicorns");
  absl::Status bad_report = StatusOf(rpc::Call(*stub, &v1::Scheduler::Stub::ReportLedger, report,
                                               absl::Seconds(5), "scheduler"));
  EXPECT_EQ(bad_report.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_report.message()), HasSubstr("records[0].object.object: unknown object"));

  v1::JobStatusRequest known;
  known.set_job_id(job_.name());
  absl::StatusOr<v1::JobStatus> good = rpc::Call(*stub, &v1::Scheduler::Stub::GetJobStatus,
                                                 known, absl::Seconds(5), "scheduler");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->state(), "placing");
}


// Oversized reports and ids that are no worker's are refused before
// anything is kept (config/request_limits.h): no report becomes a huge
// ledger.jsonl line.
TEST_F(ServicesTest, SchedulerRefusesOversizedReportsAndForeignIds) {
  auto stub = v1::Scheduler::NewStub(channel_);
  v1::LedgerReport huge_id;
  huge_id.set_worker_id(std::string(1 << 20, 'a'));
  huge_id.add_records()->mutable_object()->set_object("kv_cache");
  absl::Status s = StatusOf(
      rpc::Call(*stub, &v1::Scheduler::Stub::ReportLedger, huge_id, absl::Seconds(5), "scheduler"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("worker_id: 1048576 bytes; a worker id has at most 32"));
  // The refusal does not echo the megabyte back.
  EXPECT_LT(s.message().size(), 200u);

  v1::LedgerReport many;
  many.set_worker_id("actor-0");
  for (int i = 0; i <= config::RequestLimits().max_ledger_records; ++i) {
    v1::ObjectRecord* o = many.add_records()->mutable_object();
    o->set_object("kv_cache");
    o->set_stage("rollout");
  }
  s = StatusOf(
      rpc::Call(*stub, &v1::Scheduler::Stub::ReportLedger, many, absl::Seconds(5), "scheduler"));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("records: 65537 records"));

  v1::HeartbeatRequest beat;
  beat.set_worker_id("not a worker");
  s = StatusOf(
      rpc::Call(*stub, &v1::Scheduler::Stub::Heartbeat, beat, absl::Seconds(5), "scheduler"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("worker_id: "));
}

// A worker's batched records reach the scheduler's ledger over gRPC, each
// once and in the order the worker made them, in one call.
TEST_F(ServicesTest, SchedulerRecordsAForwardedBatchInOrder) {
  ledger::Ledger ledger;
  std::vector<std::string> objects;
  ledger.AddRecordObserver([&objects](std::string_view line) {
    if (line.find(R"("type":"object")") != std::string_view::npos) objects.emplace_back(line);
  });
  scheduler_service_.AttachLedger(&ledger);
  auto stub = v1::Scheduler::NewStub(channel_);
  launch::LedgerForwarder forwarder("actor-0", [&stub](const v1::LedgerReport& report) {
    return StatusOf(rpc::Call(*stub, &v1::Scheduler::Stub::ReportLedger, report,
                              absl::Seconds(5), "scheduler"));
  });
  const std::vector<std::string> names = {"kv_cache", "workspace", "kv_cache", "parameters"};
  for (size_t i = 0; i < names.size(); ++i) {
    v1::LedgerRecord record;
    record.mutable_object()->set_object(names[i]);
    record.mutable_object()->set_bytes(static_cast<int64_t>(10 + i));
    record.mutable_object()->set_stage("rollout");
    forwarder.Add(std::move(record));
  }
  const launch::LedgerForwarder::Counts counts = forwarder.Close();
  // No worker has registered: detaching has no one to wait for.
  scheduler_service_.AttachLedger(nullptr);
  EXPECT_EQ(counts.calls, 1);
  EXPECT_EQ(counts.sent, 4);
  ASSERT_EQ(objects.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_THAT(objects[i], HasSubstr(absl::StrCat(R"("bytes":)", 10 + i)));
    EXPECT_THAT(objects[i], HasSubstr(absl::StrCat(R"("object":")", names[i], R"(","role":"actor-0")")));
  }
}


// Reference.Scores: a reward model's score per sample when the job has one
// (PPO with ppo.reward reward_model); FAILED_PRECONDITION without one; a
// reward model file that is missing stops the role from being built.
TEST_F(ServicesTest, ReferenceScoresWithTheJobsRewardModelOnly) {
  const std::string path = ::testing::TempDir() + "/services_test_rm.safetensors";
  const int64_t vocab = model::VocabSize(job_.model(), tokenizer_->vocab_size());
  model::Transformer rm(job_.model(), vocab, model::Head::kScalar);
  model::NamedTensors weights;
  for (const auto& [name, tensor] : rm->NamedWeights()) weights.emplace_back(name, tensor.detach());
  ASSERT_TRUE(model::SaveSafetensors(path, weights, {}).ok());

  v1::JobConfig ppo = job_;
  ppo.set_algorithm("ppo");
  ppo.mutable_ppo()->set_reward(v1::PpoConfig::REWARD_MODEL);
  ppo.mutable_ppo()->set_reward_model_path(path + ".missing");
  auto missing = reference::NewLocalReference(ppo, tokenizer_.get(), nullptr);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(".missing"));

  ppo.mutable_ppo()->set_reward_model_path(path);
  auto with_rm = reference::NewLocalReference(ppo, tokenizer_.get(), nullptr);
  ASSERT_TRUE(with_rm.ok()) << with_rm.status();
  auto without_rm = reference::NewLocalReference(job_, tokenizer_.get(), nullptr);
  ASSERT_TRUE(without_rm.ok()) << without_rm.status();
  reference::ReferenceService scoring{"reference-0"}, plain{"reference-1"};
    scoring.Bind(with_rm->get(), config::RequestLimitsFor(ppo.model(), vocab), ::testing::TempDir());
    plain.Bind(without_rm->get(), config::RequestLimitsFor(job_.model(), vocab), ::testing::TempDir());
  absl::StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start("127.0.0.1:0", {&scoring});
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::unique_ptr<rpc::Server>> plain_server =
      rpc::Server::Start("127.0.0.1:0", {&plain});
  ASSERT_TRUE(plain_server.ok()) << plain_server.status();

  v1::LogProbRequest request;
  for (const char* text : {"2", "7", "12"}) {
    v1::Sample* sample = request.add_samples();
    for (int id : Ids("5+7=")) sample->add_prompt_tokens(id);
    for (int id : Ids(text)) sample->add_response_tokens(id);
  }
  auto client =
      reference::NewGrpcReferenceClient(rpc::NewChannel((*server)->address()), "reference-0",
                                        absl::Seconds(30), ::testing::TempDir());
  absl::StatusOr<v1::ScoreResponse> scores = client->Scores(request);
  ASSERT_TRUE(scores.ok()) << scores.status();
  ASSERT_EQ(scores->scores_size(), 3);
  // Different responses, different scores (a random but real model).
  EXPECT_NE(scores->scores(0), scores->scores(1));
  EXPECT_NE(scores->scores(1), scores->scores(2));

  v1::LogProbRequest bad = request;
  bad.mutable_samples(1)->set_response_tokens(0, 100000);
  absl::Status out_of_vocab = StatusOf(client->Scores(bad));
  EXPECT_EQ(out_of_vocab.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out_of_vocab.message()), HasSubstr("100000"));

  auto plain_client =
      reference::NewGrpcReferenceClient(rpc::NewChannel((*plain_server)->address()), "reference-1",
                                        absl::Seconds(30), ::testing::TempDir());
  absl::Status no_rm = StatusOf(plain_client->Scores(request));
  EXPECT_EQ(no_rm.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(no_rm.message()), HasSubstr("ppo.reward"));
}

// An engine that lets LibTorch errors escape (as one without the edge of
// model/torch_status.h would): a failed check from Generate, an out of
// memory from SyncWeights.
class ThrowingActor final : public actor::RolloutWorker {
 public:
  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest&) override {
    torch::ones({2}).view({3});
    return v1::GenerateResponse();
  }
  absl::StatusOr<v1::WeightSyncStats> SyncWeights(int64_t) override {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "device full");
    return v1::WeightSyncStats();
  }
  int64_t policy_version() const override { return -1; }
};

// The service turns what escapes an engine into the status the engines'
// own edge (actor::GuardTorchErrors) gives: a launched run fails as an
// embedded one does.
TEST(ServiceEdgeTest, LibTorchErrorsGetTheCodeTheEmbeddedEdgeGives) {
  ThrowingActor raw;
  actor::ActorService service{"actor-9"};
  service.Bind(&raw, config::RequestLimitsFor(testing_util::TinyJob().model(), 100));
  absl::StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  auto launched = actor::NewGrpcActorClient(rpc::NewChannel((*server)->address()), "actor-9",
                                            absl::Seconds(30));
  std::unique_ptr<actor::RolloutWorker> embedded =
      actor::GuardTorchErrors(std::make_unique<ThrowingActor>(), "actor-9");

  for (actor::RolloutWorker* worker : {launched.get(), embedded.get()}) {
    absl::Status check = StatusOf(worker->Generate(v1::GenerateRequest()));
    EXPECT_EQ(check.code(), absl::StatusCode::kInternal) << check;
    EXPECT_THAT(std::string(check.message()), HasSubstr("actor-9"));
    EXPECT_THAT(std::string(check.message()), HasSubstr("shape '[3]' is invalid"));
    absl::Status oom = StatusOf(worker->SyncWeights(1));
    EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted) << oom;
    EXPECT_THAT(std::string(oom.message()), HasSubstr("out of memory: device full"));
  }
}

}  // namespace
}  // namespace trellis
