#include "environment/pool.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "env/testing/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::environment {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Steps by the action: "ok" reward 1; "hang" blocks until released;
// "nan" a NaN reward; "meta" metadata_json "[1]"; "down" Unavailable;
// "fail" Internal; "late" DeadlineExceeded of its own.
class FakeEnvironment : public Environment {
 public:
  FakeEnvironment(std::shared_ptr<absl::Notification> release,
                  std::shared_ptr<std::atomic<int>> calls)
      : release_(std::move(release)), calls_(std::move(calls)) {}

  absl::StatusOr<v1::OpenEpisodeResponse> Open(const v1::OpenEpisodeRequest& request) override {
    ++*calls_;
    if (request.prompt() == "no-name-tool") {
      v1::OpenEpisodeResponse r;
      r.add_tools()->set_description("nameless");
      return r;
    }
    return v1::OpenEpisodeResponse();
  }

  absl::StatusOr<v1::EnvironmentStepResponse> Step(
      const v1::EnvironmentStepRequest& request) override {
    ++*calls_;
    const std::string& a = request.action();
    v1::EnvironmentStepResponse r;
    if (a == "hang") release_->WaitForNotification();
    if (a == "nan") r.set_reward(std::numeric_limits<float>::quiet_NaN());
    if (a == "meta") r.set_metadata_json("[1]");
    if (a == "down") return absl::UnavailableError("down");
    if (a == "fail") return absl::InternalError("fail");
    if (a == "late") return absl::DeadlineExceededError("late");
    if (a == "ok") r.set_reward(1);
    return r;
  }

  absl::Status Close(const v1::CloseEpisodeRequest&) override {
    ++*calls_;
    return absl::OkStatus();
  }

  int MaxConcurrency() const override { return 3; }

 private:
  std::shared_ptr<absl::Notification> release_;
  std::shared_ptr<std::atomic<int>> calls_;
};

class PoolTest : public ::testing::Test {
 protected:
  PoolTest() {
    config_.set_name("fake");
    config_.set_version("2");
    config_.set_call_deadline_ms(1000);
    config_.set_breaker_failures(0);
  }
  ~PoolTest() override { release_->Notify(); }

  std::unique_ptr<Environment> MakePool() {
    PoolOptions options;
    options.env = &clock_;
    options.log = [this](const std::string& line) { log_.push_back(line); };
    return NewEnvironmentPool(std::make_unique<FakeEnvironment>(release_, calls_), config_,
                              options);
  }

  static absl::StatusOr<v1::EnvironmentStepResponse> Step(Environment& env,
                                                          const std::string& action) {
    v1::EnvironmentStepRequest request;
    request.set_episode_id("e");
    request.set_action(action);
    return env.Step(request);
  }

  v1::EnvironmentConfig config_;
  env::testing::FakeEnv clock_;
  std::vector<std::string> log_;
  std::shared_ptr<absl::Notification> release_ = std::make_shared<absl::Notification>();
  std::shared_ptr<std::atomic<int>> calls_ = std::make_shared<std::atomic<int>>(0);
};

TEST_F(PoolTest, AHungCallReturnsAtItsDeadline) {
  std::unique_ptr<Environment> pool = MakePool();
  absl::StatusOr<v1::EnvironmentStepResponse> r = absl::UnknownError("not run");
  std::thread caller([&] { r = Step(*pool, "hang"); });
  clock_.BlockUntilWaiting(1);
  clock_.Advance(absl::Milliseconds(1000));
  caller.join();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("fake@2 Step: no answer within 1s"));
  EXPECT_EQ(FailureReason(r.status()), "deadline");
  // The pool still answers while the hung call is left behind.
  EXPECT_TRUE(Step(*pool, "ok").ok());
}

TEST_F(PoolTest, FailedCallsSayTheirReason) {
  std::unique_ptr<Environment> pool = MakePool();
  EXPECT_EQ(FailureReason(Step(*pool, "down").status()), "unavailable");
  EXPECT_EQ(FailureReason(Step(*pool, "fail").status()), "call_failed");
  EXPECT_EQ(FailureReason(Step(*pool, "late").status()), "deadline");
  absl::StatusOr<v1::EnvironmentStepResponse> nan = Step(*pool, "nan");
  EXPECT_EQ(FailureReason(nan.status()), "malformed");
  EXPECT_THAT(nan.status().message(), HasSubstr("reward must be finite"));
  absl::StatusOr<v1::EnvironmentStepResponse> meta = Step(*pool, "meta");
  EXPECT_EQ(FailureReason(meta.status()), "malformed");
  EXPECT_THAT(meta.status().message(), HasSubstr("metadata_json must be a JSON object"));
  v1::OpenEpisodeRequest open;
  open.set_prompt("no-name-tool");
  EXPECT_EQ(FailureReason(pool->Open(open).status()), "malformed");
  EXPECT_TRUE(Step(*pool, "ok").ok());
}

TEST_F(PoolTest, TheBreakerOpensRefusesThenClosesAfterAGoodTrial) {
  config_.set_breaker_failures(2);
  config_.set_breaker_pause_ms(5000);
  std::unique_ptr<Environment> pool = MakePool();
  EXPECT_FALSE(Step(*pool, "fail").ok());
  EXPECT_FALSE(Step(*pool, "down").ok());
  const int calls_when_open = calls_->load();
  absl::StatusOr<v1::EnvironmentStepResponse> refused = Step(*pool, "ok");
  EXPECT_EQ(FailureReason(refused.status()), "circuit_open");
  EXPECT_THAT(refused.status().message(), HasSubstr("circuit open: fake@2 failed 2"));
  EXPECT_EQ(FailureReason(pool->Open(v1::OpenEpisodeRequest()).status()), "circuit_open");
  EXPECT_EQ(calls_->load(), calls_when_open) << "an open circuit calls nothing";
  // Close is passed on even while open.
  EXPECT_TRUE(pool->Close(v1::CloseEpisodeRequest()).ok());

  clock_.Advance(absl::Milliseconds(5000));
  EXPECT_TRUE(Step(*pool, "ok").ok()) << "the trial after the pause";
  EXPECT_TRUE(Step(*pool, "ok").ok());

  ASSERT_EQ(log_.size(), 4u);
  EXPECT_THAT(log_[0], StartsWith("environment fake@2: failing: "));
  EXPECT_THAT(log_[1], StartsWith("environment fake@2: circuit open: fake@2 failed 2"));
  EXPECT_EQ(log_[2], "environment fake@2: half-open: the pause is over; one trial call decides");
  EXPECT_EQ(log_[3], "environment fake@2: recovered after 2 consecutive failed calls");
}

TEST_F(PoolTest, AFailedTrialKeepsTheCircuitOpen) {
  config_.set_breaker_failures(1);
  config_.set_breaker_pause_ms(100);
  std::unique_ptr<Environment> pool = MakePool();
  EXPECT_FALSE(Step(*pool, "fail").ok());
  EXPECT_EQ(FailureReason(Step(*pool, "ok").status()), "circuit_open");
  clock_.Advance(absl::Milliseconds(100));
  EXPECT_EQ(Step(*pool, "fail").status().code(), absl::StatusCode::kInternal);
  absl::StatusOr<v1::EnvironmentStepResponse> refused = Step(*pool, "ok");
  EXPECT_EQ(FailureReason(refused.status()), "circuit_open");
  EXPECT_THAT(refused.status().message(), HasSubstr("circuit open"));
}

TEST_F(PoolTest, KeepsTheInnerConcurrencyAndLabelsWithoutAVersion) {
  config_.clear_version();
  std::unique_ptr<Environment> pool = MakePool();
  EXPECT_EQ(pool->MaxConcurrency(), 3);
  EXPECT_EQ(EnvironmentLabel(config_), "fake");
}

}  // namespace
}  // namespace trellis::environment
