// A launched job is secured by default: `trellis launch` makes the job's
// secret (OUT/launch/secret, mode 0600) and every process checks it. While
// a job trains, from outside it:
//  - every RPC of every service (scheduler, learner and its weight stream,
//    reference, actor, verifier) without the secret is UNAUTHENTICATED
//    before it does anything, and its message names no job; with the
//    secret the same call reaches the service (served, or refused by the
//    service's own checks);
//  - a fake worker cannot register, and with the secret cannot take a
//    slot that is taken;
//  - paths outside the run directory are refused, naming the path;
//  - the job cancelled with the secret ends.
// `trellis launch --insecure` says so on stderr and makes no secret;
// `trellis serve` without a secret refuses to start.

#include "rpc/auth.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <thread>

#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/channel.h"
#include "tests/launch_util.h"
#include "tests/tiny_job.h"
#include "trellis/v1/scheduler.grpc.pb.h"
#include "trellis/v1/services.grpc.pb.h"
#include "trellis/v1/weights.grpc.pb.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::Slurp;
using testing_util::StartTrellis;
using testing_util::Wait;
using testing_util::Processes;
using testing_util::WaitFor;
using testing_util::WriteText;
using Channel = std::shared_ptr<grpc::Channel>;
using Caller = std::function<absl::Status(const Channel&)>;

constexpr int kOutOfVocab = 1 << 30;

// A channel to `address` sending `secret`.
Channel To(const std::string& address, const rpc::JobSecret& secret) {
  return rpc::NewChannel(address, rpc::kDefaultStallLimit, secret);
}

// One unary call of Stub::method.
template <typename Stub, typename Request, typename Response>
Caller Unary(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
             Request request) {
  return [method, request](const Channel& channel) {
    Stub stub(channel);
    return rpc::Call(stub, method, request, absl::Seconds(60), "").status();
  };
}

// One server-streaming call of Stub::method, read to its end.
template <typename Stub, typename Request, typename Chunk>
Caller Streaming(std::unique_ptr<grpc::ClientReader<Chunk>> (Stub::*method)(grpc::ClientContext*,
                                                                            const Request&),
                 Request request) {
  return [method, request](const Channel& channel) {
    Stub stub(channel);
    grpc::ClientContext context;
    rpc::SetDeadline(context, absl::Seconds(60));
    std::unique_ptr<grpc::ClientReader<Chunk>> reader = (stub.*method)(&context, request);
    Chunk chunk;
    while (reader->Read(&chunk)) {
    }
    return rpc::FromGrpc(reader->Finish());
  };
}

v1::JobConfig Job() {
  v1::JobConfig job = testing_util::TinyJob();
  job.set_name("secret-job-name");
  job.mutable_grpo()->set_steps(100000);  // Cancelled by the test.
  job.mutable_deployment()->mutable_actor()->set_count(1);
  job.mutable_deployment()->set_weight_transport("grpc");
  return job;
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("auth_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "outside");
  }
  // A job left running by a failed assertion is stopped (the launcher
  // stops every process it started).
  void TearDown() override {
    if (launcher_ > 0 && ::kill(launcher_, SIGTERM) == 0) Wait(launcher_);
  }

  // Without the secret: UNAUTHENTICATED, naming no job. With it: `served`
  // (unset: whatever the service answers, which is not UNAUTHENTICATED).
  void ExpectGuarded(const std::string& worker, const std::string& what, const Caller& call,
                     std::optional<absl::StatusCode> served) {
    const std::string& address = addresses_.at(worker);
    const absl::Status refused = call(To(address, rpc::JobSecret::Insecure()));
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated) << what << ": " << refused;
    EXPECT_THAT(std::string(refused.message()), Not(HasSubstr("secret-job-name"))) << what;
    const absl::Status answered = call(To(address, secret_));
    if (served.has_value()) {
      EXPECT_EQ(answered.code(), *served) << what << " with the secret: " << answered;
    } else {
      EXPECT_NE(answered.code(), absl::StatusCode::kUnauthenticated) << what << ": " << answered;
    }
  }

  // With the secret: `code`, the message naming `path`.
  void ExpectPathRefused(const std::string& worker, const Caller& call, const std::string& path,
                         absl::StatusCode code) {
    const absl::Status s = call(To(addresses_.at(worker), secret_));
    EXPECT_EQ(s.code(), code) << worker << " " << path << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(path));
    EXPECT_THAT(std::string(s.message()), Not(HasSubstr("root:")));
  }

  fs::path root_;
  pid_t launcher_ = -1;
  rpc::JobSecret secret_ = rpc::JobSecret::Insecure();
  // Worker id (and "scheduler") -> address.
  std::map<std::string, std::string> addresses_;
};

v1::PathRequest Path(const std::string& path) {
  v1::PathRequest r;
  r.set_path(path);
  return r;
}

TEST_F(AuthTest, ALaunchedJobServesOnlyCallsCarryingItsSecret) {
  const v1::JobConfig job = Job();
  WriteText(root_ / "job.yaml", config::ResolvedJobYaml(job));
  const fs::path out = root_ / "run";
  launcher_ = StartTrellis({"launch", (root_ / "job.yaml").string(), "--out", out.string()},
                           root_ / "launch.log");
  // Serving, and past the warm-up (the reference weights are written).
  ASSERT_TRUE(WaitFor(
      [&] { return fs::exists(out / "workers.tsv") && fs::exists(out / "reference.safetensors"); },
      300))
      << Slurp(root_ / "launch.log");
  struct stat st;
  ASSERT_EQ(::stat((out / "launch" / "secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  absl::StatusOr<rpc::JobSecret> secret =
      rpc::JobSecret::ReadFile((out / "launch" / "secret").string());
  ASSERT_TRUE(secret.ok()) << secret.status();
  secret_ = *secret;
  {
    std::ifstream in(out / "workers.tsv");
    std::string header, id, address, pid;
    std::getline(in, header);
    while (in >> id >> address >> pid) addresses_[id] = address;
  }
  std::string scheduler = Slurp(out / "launch" / "scheduler.addr");
  addresses_["scheduler"] = scheduler.substr(0, scheduler.find_last_not_of("\n") + 1);
  ASSERT_EQ(addresses_.size(), 5u) << Slurp(out / "workers.tsv");

  // The scheduler.
  using Scheduler = v1::Scheduler::Stub;
  v1::HeartbeatRequest beat;
  beat.set_worker_id("actor-0");
  ExpectGuarded("scheduler", "Heartbeat", Unary(&Scheduler::Heartbeat, beat),
                absl::StatusCode::kOk);
  v1::LedgerReport report;
  report.set_worker_id("actor-0");
  v1::ObjectRecord* record = report.add_records()->mutable_object();
  record->set_object("parameters");
  record->set_bytes(1);
  record->set_stage("load");
  ExpectGuarded("scheduler", "ReportLedger", Unary(&Scheduler::ReportLedger, report),
                absl::StatusCode::kOk);
  v1::JobStatusRequest status;
  status.set_job_id(job.name());
  ExpectGuarded("scheduler", "GetJobStatus", Unary(&Scheduler::GetJobStatus, status),
                absl::StatusCode::kOk);
  ExpectGuarded("scheduler", "SubmitJob", Unary(&Scheduler::SubmitJob, job),
                absl::StatusCode::kFailedPrecondition);
  // A fake actor: without the secret it cannot register; with it, the
  // slot is taken and stays with the real actor. Without an index, with the
  // secret, it joins as a new actor (grpc weights serve any number): a slot
  // of its own, and no work until it heartbeats.
  v1::RegisterRequest fake;
  fake.set_role(v1::ACTOR);
  fake.set_index(0);
  fake.set_address("127.0.0.1:1");
  fake.set_pid(1);
  ExpectGuarded("scheduler", "Register", Unary(&Scheduler::Register, fake),
                absl::StatusCode::kFailedPrecondition);
  fake.clear_index();
  ExpectGuarded("scheduler", "Register without an index", Unary(&Scheduler::Register, fake),
                absl::StatusCode::kOk);
  // Drain: only actors drain (the learner is named, so the job goes on).
  v1::DrainRequest drain;
  drain.set_worker_id("learner-0");
  ExpectGuarded("scheduler", "DrainWorker", Unary(&Scheduler::DrainWorker, drain),
                absl::StatusCode::kInvalidArgument);
  v1::JobStatusRequest unknown;
  unknown.set_job_id("guess");
  const absl::Status guessed =
      Unary(&Scheduler::GetJobStatus, unknown)(To(addresses_["scheduler"], secret_));
  EXPECT_EQ(guessed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(guessed.message()), Not(HasSubstr(job.name())));

  // The learner and its weight stream.
  using Learner = v1::Learner::Stub;
  v1::SftBatch sft;
  sft.add_pairs()->add_prompt_tokens(kOutOfVocab);
  v1::TrainBatch train;
  train.add_samples()->add_prompt_tokens(kOutOfVocab);
  v1::PreferenceBatch pairs;
  pairs.add_pairs()->add_prompt_tokens(kOutOfVocab);
  ExpectGuarded("learner-0", "GetVersion", Unary(&Learner::GetVersion, v1::Empty()),
                absl::StatusCode::kOk);
  {
    // Published with the secret while the job is held where its newest
    // version is published and synced already, so that this publish cannot
    // take the version the job is about to publish.
    const pid_t scheduler_pid = Processes(out).at("scheduler");
    auto version = [](auto* stub) {
      v1::VersionResponse r;
      grpc::ClientContext context;
      rpc::SetDeadline(context, absl::Seconds(10));
      return stub->GetVersion(&context, v1::Empty(), &r).ok() ? r.policy_version() : -1;
    };
    auto learner_stub = Learner(To(addresses_.at("learner-0"), secret_));
    auto actor_stub = v1::Actor::Stub(To(addresses_.at("actor-0"), secret_));
    bool held = false;
    for (int attempt = 0; attempt < 200 && !held; ++attempt) {
      ASSERT_EQ(::kill(scheduler_pid, SIGSTOP), 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // in-flight calls end
      const int64_t learner = version(&learner_stub);
      held = learner >= 0 && learner == version(&actor_stub);
      if (!held) {
        ::kill(scheduler_pid, SIGCONT);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    ASSERT_TRUE(held) << "the job never rested at a published version";
    ExpectGuarded("learner-0", "PublishWeights", Unary(&Learner::PublishWeights, v1::Empty()),
                  std::nullopt);
    ::kill(scheduler_pid, SIGCONT);
  }
  for (const auto& [what, call] : std::vector<std::pair<std::string, Caller>>{
           {"SftStep", Unary(&Learner::SftStep, sft)},
           {"EvalSft", Unary(&Learner::EvalSft, sft)},
           {"TrainStep", Unary(&Learner::TrainStep, train)},
           {"PreferenceStep", Unary(&Learner::PreferenceStep, pairs)},
           {"EvalPreference", Unary(&Learner::EvalPreference, pairs)},
           {"SaveCheckpoint", Unary(&Learner::SaveCheckpoint, Path("../outside"))},
           {"RestoreCheckpoint", Unary(&Learner::RestoreCheckpoint, Path("/etc"))}}) {
    ExpectGuarded("learner-0", what, call, absl::StatusCode::kInvalidArgument);
  }
  ExpectGuarded("learner-0", "SaveWeights",
                Unary(&Learner::SaveWeights, Path("auth_test.safetensors")), absl::StatusCode::kOk);
  EXPECT_TRUE(fs::exists(out / "auth_test.safetensors"));
  v1::FetchWeightsRequest fetch;
  fetch.set_wait_ms(1000);
  ExpectGuarded("learner-0", "WeightStream.Fetch", Streaming(&v1::WeightStream::Stub::Fetch, fetch),
                absl::StatusCode::kOk);

  // The reference.
  using Reference = v1::Reference::Stub;
  v1::LogProbRequest logprobs;
  v1::Sample* sample = logprobs.add_samples();
  sample->add_prompt_tokens(1);
  sample->add_response_tokens(2);
  ExpectGuarded("reference-0", "LogProbs", Unary(&Reference::LogProbs, logprobs),
                absl::StatusCode::kOk);
  ExpectGuarded("reference-0", "Scores", Unary(&Reference::Scores, logprobs),
                absl::StatusCode::kFailedPrecondition);
  ExpectGuarded("reference-0", "Load", Unary(&Reference::Load, Path("reference.safetensors")),
                absl::StatusCode::kOk);

  // The actor and the verifier.
  using Actor = v1::Actor::Stub;
  ExpectGuarded("actor-0", "GetVersion", Unary(&Actor::GetVersion, v1::Empty()),
                absl::StatusCode::kOk);
  v1::GenerateRequest generate;
  generate.add_prompts()->add_token_ids(kOutOfVocab);
  generate.set_responses_per_prompt(1);
  ExpectGuarded("actor-0", "Generate", Streaming(&Actor::Generate, generate),
                absl::StatusCode::kInvalidArgument);
  // A version it has (one it would wait for is another issue's bound).
  v1::SyncWeightsRequest sync;
  ExpectGuarded("actor-0", "SyncWeights", Unary(&Actor::SyncWeights, sync), std::nullopt);
  v1::VerifyRequest verify;
  v1::VerifyItem* item = verify.add_items();
  item->set_prompt("1+1=");
  item->set_response("2");
  item->set_answer("2");
  ExpectGuarded("verifier-0", "Verify", Unary(&v1::Verifier::Stub::Verify, verify),
                absl::StatusCode::kOk);

  // Paths, even with the secret: never outside the run directory.
  fs::create_directory_symlink(root_ / "outside", out / "escape");
  for (const std::string& path : {"/tmp/auth_test.safetensors", "../auth_test.safetensors"}) {
    ExpectPathRefused("learner-0", Unary(&Learner::SaveWeights, Path(path)), path,
                      absl::StatusCode::kInvalidArgument);
  }
  ExpectPathRefused("learner-0", Unary(&Learner::SaveWeights, Path("escape/w.safetensors")),
                    "escape/w.safetensors", absl::StatusCode::kPermissionDenied);
  ExpectPathRefused("learner-0", Unary(&Learner::RestoreCheckpoint, Path("escape")), "escape",
                    absl::StatusCode::kPermissionDenied);
  ExpectPathRefused("reference-0", Unary(&Reference::Load, Path("/etc/passwd")), "/etc/passwd",
                    absl::StatusCode::kInvalidArgument);
  ExpectPathRefused("reference-0", Unary(&Reference::Load, Path("escape/x.safetensors")),
                    "escape/x.safetensors", absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(fs::is_empty(root_ / "outside"));

  // Cancel: refused without the secret, the job goes on; with it, it ends.
  ExpectGuarded("scheduler", "CancelJob", Unary(&Scheduler::CancelJob, status),
                absl::StatusCode::kOk);
  Wait(launcher_);
  launcher_ = -1;
  EXPECT_THAT(Slurp(root_ / "launch.log"), HasSubstr("cancelled before step"));
}

TEST_F(AuthTest, InsecureIsExplicitAndAnnounced) {
  v1::JobConfig job = testing_util::TinyJob();
  job.mutable_grpo()->set_steps(1);
  WriteText(root_ / "job.yaml", config::ResolvedJobYaml(job));
  const int launched = Wait(StartTrellis(
      {"launch", (root_ / "job.yaml").string(), "--out", (root_ / "run").string(), "--insecure"},
      root_ / "launch.log"));
  const std::string log = Slurp(root_ / "launch.log");
  EXPECT_TRUE(WIFEXITED(launched) && WEXITSTATUS(launched) == 0) << log;
  EXPECT_THAT(log, HasSubstr("trellis launch: --insecure"));
  EXPECT_FALSE(fs::exists(root_ / "run" / "launch" / "secret"));

  // A service started without a secret and without --insecure refuses.
  const int serve =
      Wait(StartTrellis({"serve", "learner", "--scheduler", "127.0.0.1:1"}, root_ / "serve.log"));
  EXPECT_TRUE(WIFEXITED(serve) && WEXITSTATUS(serve) == 2) << Slurp(root_ / "serve.log");
  EXPECT_THAT(Slurp(root_ / "serve.log"), HasSubstr("--secret-file"));
}

}  // namespace
}  // namespace trellis
