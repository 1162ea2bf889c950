#include "environment_service/environment_service.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/channel.h"
#include "rpc/server.h"

namespace trellis::environment {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Answers a step "<action> seen" with reward `reward`, done on turn 1;
// `step_status` (when not OK) instead, and a throw for the action "throw".
// Calls wait for `release` when it is set, after saying so on `entered`.
class FakeEnvironment final : public Environment {
 public:
  absl::StatusOr<v1::OpenEpisodeResponse> Open(const v1::OpenEpisodeRequest& request) override {
    Enter();
    absl::MutexLock lock(&mu_);
    open_.insert(request.episode_id());
    v1::OpenEpisodeResponse response;
    response.set_observation(absl::StrCat(" opened for ", request.prompt()));
    response.add_tools()->set_name("calculator");
    return response;
  }

  absl::StatusOr<v1::EnvironmentStepResponse> Step(
      const v1::EnvironmentStepRequest& request) override {
    const int now = in_flight.fetch_add(1) + 1;
    for (int seen = most_in_flight.load(); now > seen;) {
      if (most_in_flight.compare_exchange_weak(seen, now)) break;
    }
    Enter();
    steps.fetch_add(1);
    in_flight.fetch_sub(1);
    if (request.action() == "throw") throw std::runtime_error("the fake broke");
    if (!step_status.ok()) return step_status;
    v1::EnvironmentStepResponse response;
    response.set_observation(absl::StrCat(" ", request.action(), " seen"));
    response.set_reward(reward);
    response.set_done(request.turn() == 1);
    return response;
  }

  absl::Status Close(const v1::CloseEpisodeRequest& request) override {
    absl::MutexLock lock(&mu_);
    open_.erase(request.episode_id());
    closes.fetch_add(1);
    return absl::OkStatus();
  }

  int MaxConcurrency() const override { return max_concurrency; }

  bool IsOpen(const std::string& episode_id) {
    absl::MutexLock lock(&mu_);
    return open_.count(episode_id) > 0;
  }

  float reward = 0.5f;
  absl::Status step_status;
  int max_concurrency = 4;
  absl::Notification* release = nullptr;
  absl::Notification entered;
  std::atomic<int> steps{0};
  std::atomic<int> closes{0};
  // Steps under way at once: now and at most.
  std::atomic<int> in_flight{0};
  std::atomic<int> most_in_flight{0};

 private:
  void Enter() {
    if (release == nullptr) return;
    if (!entered_once_.exchange(true)) entered.Notify();
    release->WaitForNotification();
  }

  std::atomic<bool> entered_once_{false};
  absl::Mutex mu_;
  std::set<std::string> open_ ABSL_GUARDED_BY(mu_);
};

// `fake` served on 127.0.0.1:0.
struct Served {
  explicit Served(FakeEnvironment* fake) : service(NewEnvironmentService(fake)) {
    absl::StatusOr<std::unique_ptr<rpc::Server>> started =
        rpc::Server::Start("127.0.0.1:0", {service.get()});
    EXPECT_TRUE(started.ok()) << started.status();
    server = *std::move(started);
    server->SetServing(true);
  }
  std::unique_ptr<v1::Environment::Service> service;
  std::unique_ptr<rpc::Server> server;
};

v1::EnvironmentConfig Config(const std::string& address, int call_deadline_ms = 10000) {
  v1::EnvironmentConfig config;
  config.set_name("remote");
  config.set_address(address);
  config.set_call_deadline_ms(call_deadline_ms);
  config.set_workers(3);
  return config;
}

std::unique_ptr<Environment> Remote(const std::string& address, int call_deadline_ms = 10000) {
  absl::StatusOr<std::unique_ptr<Environment>> remote =
      NewRemoteEnvironment(Config(address, call_deadline_ms));
  EXPECT_TRUE(remote.ok()) << remote.status();
  return remote.ok() ? *std::move(remote) : nullptr;
}

v1::EnvironmentStepRequest StepRequest(const std::string& episode_id, const std::string& action,
                                       int turn = 0) {
  v1::EnvironmentStepRequest request;
  request.set_episode_id(episode_id);
  request.set_action(action);
  request.set_turn(turn);
  return request;
}

TEST(EnvironmentServiceTest, OpenStepCloseRoundTrip) {
  FakeEnvironment fake;
  Served served(&fake);
  std::unique_ptr<Environment> remote = Remote(served.server->address());
  ASSERT_NE(remote, nullptr);
  EXPECT_EQ(remote->MaxConcurrency(), 3);

  v1::OpenEpisodeRequest open;
  open.set_episode_id("7-0-0-1");
  open.set_prompt("guess");
  absl::StatusOr<v1::OpenEpisodeResponse> opened = remote->Open(open);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->observation(), " opened for guess");
  ASSERT_EQ(opened->tools_size(), 1);
  EXPECT_EQ(opened->tools(0).name(), "calculator");
  EXPECT_TRUE(fake.IsOpen("7-0-0-1"));

  absl::StatusOr<v1::EnvironmentStepResponse> first = remote->Step(StepRequest("7-0-0-1", "50="));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->observation(), " 50= seen");
  EXPECT_EQ(first->reward(), 0.5f);
  EXPECT_FALSE(first->done());
  absl::StatusOr<v1::EnvironmentStepResponse> second =
      remote->Step(StepRequest("7-0-0-1", "25=", 1));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->done());

  v1::CloseEpisodeRequest close;
  close.set_episode_id("7-0-0-1");
  EXPECT_TRUE(remote->Close(close).ok());
  EXPECT_FALSE(fake.IsOpen("7-0-0-1"));
}

TEST(EnvironmentServiceTest, ServiceKeepsCodesAndRemoteMapsThemForTheCaller) {
  FakeEnvironment fake;
  Served served(&fake);
  auto stub = v1::Environment::NewStub(rpc::NewChannel(served.server->address()));
  std::unique_ptr<Environment> remote = Remote(served.server->address());
  ASSERT_NE(remote, nullptr);
  const std::string prefix = absl::StrCat("the environment at ", served.server->address(), " Step");

  fake.step_status = absl::NotFoundError("no episode e1");
  absl::StatusOr<v1::EnvironmentStepResponse> raw = rpc::Call(
      *stub, &v1::Environment::Stub::Step, StepRequest("e1", "1"), absl::Seconds(10), "Step");
  EXPECT_EQ(raw.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(raw.status().message()), HasSubstr("no episode e1"));
  absl::StatusOr<v1::EnvironmentStepResponse> mapped = remote->Step(StepRequest("e1", "1"));
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(mapped.status().message()), StartsWith(prefix));
  EXPECT_THAT(std::string(mapped.status().message()), HasSubstr("no episode e1 (NOT_FOUND)"));

  fake.step_status = absl::UnavailableError("warming up");
  mapped = remote->Step(StepRequest("e1", "1"));
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(mapped.status().message()), HasSubstr("warming up"));

  fake.step_status = absl::OkStatus();
  mapped = remote->Step(StepRequest("e1", "throw"));
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(mapped.status().message()),
              HasSubstr("Step: the environment threw: the fake broke"));
  // The service keeps serving.
  EXPECT_TRUE(remote->Step(StepRequest("e1", "1")).ok());
}

TEST(EnvironmentServiceTest, RequestsWithoutEpisodeIdOrWithNegativeTurnAreRefused) {
  FakeEnvironment fake;
  Served served(&fake);
  auto stub = v1::Environment::NewStub(rpc::NewChannel(served.server->address()));

  absl::StatusOr<v1::OpenEpisodeResponse> open = rpc::Call(
      *stub, &v1::Environment::Stub::Open, v1::OpenEpisodeRequest(), absl::Seconds(10), "Open");
  EXPECT_EQ(open.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(open.status().message()), HasSubstr("episode_id: required"));
  absl::StatusOr<v1::EnvironmentStepResponse> step = rpc::Call(
      *stub, &v1::Environment::Stub::Step, StepRequest("", "1"), absl::Seconds(10), "Step");
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(step.status().message()), HasSubstr("episode_id: required"));
  step = rpc::Call(*stub, &v1::Environment::Stub::Step, StepRequest("e1", "1", -1),
                   absl::Seconds(10), "Step");
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(step.status().message()), HasSubstr("turn: must be >= 0"));
  EXPECT_THAT(std::string(step.status().message()), HasSubstr("found -1"));
  absl::StatusOr<v1::CloseEpisodeResponse> close = rpc::Call(
      *stub, &v1::Environment::Stub::Close, v1::CloseEpisodeRequest(), absl::Seconds(10), "Close");
  EXPECT_EQ(close.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fake.steps.load(), 0);
  EXPECT_EQ(fake.closes.load(), 0);
}

// A fake whose calls wait for `release`, served, and reached with a call
// deadline of 200 ms.
struct Stalled {
  Stalled() { fake.release = &release; }
  FakeEnvironment fake;
  absl::Notification release;
  Served served{&fake};
  std::unique_ptr<Environment> remote = Remote(served.server->address(), 200);
};

TEST(EnvironmentServiceTest, SlowEnvironmentGivesDeadlineExceeded) {
  Stalled stalled;
  ASSERT_NE(stalled.remote, nullptr);
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::EnvironmentStepResponse> step = stalled.remote->Step(StepRequest("e1", "1"));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(200) + absl::Seconds(5));
  EXPECT_EQ(step.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(
      std::string(step.status().message()),
      StartsWith(absl::StrCat("the environment at ", stalled.served.server->address(), " Step")));
  stalled.release.Notify();
}

TEST(EnvironmentServiceTest, OpenAnsweredAfterTheDeadlineIsClosedAgain) {
  Stalled stalled;
  ASSERT_NE(stalled.remote, nullptr);
  v1::OpenEpisodeRequest open;
  open.set_episode_id("late");
  EXPECT_EQ(stalled.remote->Open(open).status().code(), absl::StatusCode::kDeadlineExceeded);
  // The service's deadline came with the call, a little after the
  // client's; the environment answers well after both.
  absl::SleepFor(absl::Milliseconds(500));
  stalled.release.Notify();
  // The service closes the episode its caller gave up on.
  FakeEnvironment& fake = stalled.fake;
  for (int i = 0; i < 1000 && fake.closes.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(fake.closes.load(), 1);
  EXPECT_FALSE(fake.IsOpen("late"));
}

TEST(EnvironmentServiceTest, CallsBeyondMaxConcurrencyWaitWithinTheirDeadline) {
  FakeEnvironment fake;
  fake.max_concurrency = 1;
  absl::Notification release;
  fake.release = &release;
  Served served(&fake);
  std::unique_ptr<Environment> patient = Remote(served.server->address(), 30000);
  std::unique_ptr<Environment> hurried = Remote(served.server->address(), 200);
  ASSERT_NE(patient, nullptr);
  ASSERT_NE(hurried, nullptr);

  absl::StatusOr<v1::EnvironmentStepResponse> first;
  std::thread caller([&] { first = patient->Step(StepRequest("e1", "1")); });
  fake.entered.WaitForNotification();
  absl::StatusOr<v1::EnvironmentStepResponse> second = hurried->Step(StepRequest("e2", "1"));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kDeadlineExceeded);
  release.Notify();
  caller.join();
  EXPECT_TRUE(first.ok()) << first.status();
  // The second call did not reach the environment while the first was in it.
  EXPECT_EQ(fake.most_in_flight.load(), 1);
}

TEST(RemoteEnvironmentTest, UnreachableServiceIsUnavailable) {
  std::string address;
  {
    FakeEnvironment fake;
    Served gone(&fake);
    address = gone.server->address();
  }
  std::unique_ptr<Environment> remote = Remote(address, 5000);
  ASSERT_NE(remote, nullptr);
  v1::OpenEpisodeRequest open;
  open.set_episode_id("e1");
  absl::StatusOr<v1::OpenEpisodeResponse> opened = remote->Open(open);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(opened.status().message()),
              StartsWith(absl::StrCat("the environment at ", address, " Open")));
}

TEST(RemoteEnvironmentTest, NonFiniteRewardIsMalformed) {
  for (float reward :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    FakeEnvironment fake;
    fake.reward = reward;
    Served served(&fake);
    std::unique_ptr<Environment> remote = Remote(served.server->address());
    ASSERT_NE(remote, nullptr);
    absl::StatusOr<v1::EnvironmentStepResponse> step = remote->Step(StepRequest("e1", "1", 3));
    EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument) << reward;
    EXPECT_THAT(std::string(step.status().message()), HasSubstr("malformed reply: reward "));
    EXPECT_THAT(std::string(step.status().message()),
                HasSubstr("is not finite (episode e1, turn 3)"));
  }
}

TEST(RemoteEnvironmentTest, FactoryNamesTheBadField) {
  v1::EnvironmentConfig config = Config("");
  EXPECT_THAT(std::string(NewRemoteEnvironment(config).status().message()),
              StartsWith("environment.address: required"));
  config = Config("no-port");
  EXPECT_EQ(NewRemoteEnvironment(config).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(NewRemoteEnvironment(config).status().message()),
              StartsWith("environment.address: "));
  config = Config("127.0.0.1:1", 0);
  EXPECT_THAT(std::string(NewRemoteEnvironment(config).status().message()),
              StartsWith("environment.call_deadline_ms: must be >= 1, found 0"));
  config = Config("127.0.0.1:1");
  config.set_workers(0);
  EXPECT_THAT(std::string(NewRemoteEnvironment(config).status().message()),
              StartsWith("environment.workers: must be >= 1, found 0"));
}

}  // namespace
}  // namespace trellis::environment
