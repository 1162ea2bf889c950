#include "scheduler/worker_registry.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "env/testing/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::scheduler {
namespace {

using ::testing::HasSubstr;
using env::testing::FakeEnv;

v1::JobConfig Job(int actors) {
  v1::JobConfig job;
  job.mutable_deployment()->mutable_actor()->set_count(actors);
  job.mutable_grpo()->set_kl_coef(0);  // No reference expected.
  return job;
}

v1::RegisterRequest Request(v1::Role role, std::optional<int> index = std::nullopt,
                            int64_t pid = 100) {
  v1::RegisterRequest r;
  r.set_role(role);
  r.set_address(absl::StrCat("127.0.0.1:", pid));
  r.set_pid(pid);
  if (index) r.set_index(*index);
  return r;
}

TEST(WorkerRegistryTest, IdsFollowTheLauncherIndexOrTheNextFreeOne) {
  WorkerRegistry registry(Job(3));
  EXPECT_EQ(*registry.Add(Request(v1::ACTOR, 2)), "actor-2");
  EXPECT_EQ(*registry.Add(Request(v1::ACTOR)), "actor-0");
  EXPECT_EQ(*registry.Add(Request(v1::ACTOR)), "actor-1");
  registry.RefuseJoiners("receiver slots are fixed");
  absl::StatusOr<std::string> extra = registry.Add(Request(v1::ACTOR));
  EXPECT_EQ(extra.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(extra.status().message(), HasSubstr("needs 3 actor"));
  EXPECT_THAT(extra.status().message(), HasSubstr("cannot join: receiver slots are fixed"));
  EXPECT_THAT(registry.Add(Request(v1::ACTOR, 3)).status().message(),
              HasSubstr("index: 3 is outside [0, 3) for actor; another actor cannot join"));
}

// An actor without an index joins a job that has its actors; asked to
// drain it stays alive until the pool releases it, then it is gone: no
// longer live, never declared dead by its silence.
TEST(WorkerRegistryTest, AnActorJoinsBeyondTheCountAndLeavesOnceReleased) {
  FakeEnv env;
  WorkerRegistry registry(Job(1), &env);
  ASSERT_EQ(*registry.Add(Request(v1::ACTOR, 0, 100)), "actor-0");
  EXPECT_EQ(registry.Add(Request(v1::LEARNER, std::nullopt, 101)).status().code(),
            absl::StatusCode::kOk);
  EXPECT_EQ(registry.Add(Request(v1::LEARNER, std::nullopt, 102)).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "only actors join";
  ASSERT_EQ(*registry.Add(Request(v1::ACTOR, std::nullopt, 103)), "actor-1");
  // A StatefulSet scaled up names the slot: past the count, it joins too.
  ASSERT_EQ(*registry.Add(Request(v1::ACTOR, 4, 104)), "actor-4");
  ASSERT_TRUE(registry.Heartbeat("actor-1").ok());
  EXPECT_TRUE(registry.Workers(v1::ACTOR)[1].ready);

  EXPECT_EQ(registry.Drain("actor-9").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Drain("learner-0").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry.Drain("actor-1").ok());
  EXPECT_TRUE(registry.Workers(v1::ACTOR)[1].draining);
  EXPECT_TRUE(registry.Alive("actor-1"));
  EXPECT_FALSE(registry.Released("actor-1"));
  registry.Release("actor-1");
  EXPECT_TRUE(registry.Released("actor-1"));
  EXPECT_FALSE(registry.Alive("actor-1"));
  EXPECT_THAT(registry.LiveIds(), ::testing::Not(::testing::Contains("actor-1")));
  EXPECT_EQ(registry.Drain("actor-1").code(), absl::StatusCode::kFailedPrecondition);
  env.Advance(absl::Hours(1));
  const SilenceChanges changes = registry.CheckSilence({absl::Seconds(1), absl::Seconds(2)});
  for (const WorkerInfo& w : changes.dead) EXPECT_NE(w.id, "actor-1") << "it left";
}

TEST(WorkerRegistryTest, BadRegistrationsAreRefusedWithTheField) {
  WorkerRegistry registry(Job(2));
  registry.RefuseJoiners("receiver slots are fixed");
  v1::RegisterRequest no_address = Request(v1::ACTOR);
  no_address.clear_address();
  EXPECT_EQ(registry.Add(no_address).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Add(Request(v1::ROLE_UNSPECIFIED)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Add(Request(v1::ACTOR, 5)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(registry.Add(Request(v1::ACTOR, 1)).ok());
  EXPECT_EQ(registry.Add(Request(v1::ACTOR, 1, 200)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(WorkerRegistryTest, ASlotIsGivenOnceUntilItsWorkerIsDeclaredDead) {
  WorkerRegistry registry(Job(1));
  registry.RefuseJoiners("slots only");  // else another actor would join
  ASSERT_EQ(*registry.Add(Request(v1::ACTOR, 0, 100)), "actor-0");
  // The same process asking again gets its slot back.
  EXPECT_EQ(*registry.Add(Request(v1::ACTOR, 0, 100)), "actor-0");
  // Another process may not take it, with or without naming it.
  for (std::optional<int> index : {std::optional<int>(0), std::optional<int>()}) {
    absl::StatusOr<std::string> taken = registry.Add(Request(v1::ACTOR, index, 200));
    EXPECT_EQ(taken.status().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(registry.Workers(v1::ACTOR).front().request.pid(), 100);
  // Once it is dead, its restart takes the slot over, alive.
  ASSERT_TRUE(registry.MarkDead("actor-0"));
  ASSERT_EQ(*registry.Add(Request(v1::ACTOR, 0, 300)), "actor-0");
  EXPECT_TRUE(registry.Alive("actor-0"));
  EXPECT_EQ(registry.Workers(v1::ACTOR).front().request.pid(), 300);
  EXPECT_TRUE(registry.Heartbeat("actor-0").ok());
}

TEST(WorkerRegistryTest, WaitCompleteNamesTheRolesStillShort) {
  FakeEnv env;
  WorkerRegistry registry(Job(2), &env);
  ASSERT_TRUE(registry.Add(Request(v1::ACTOR)).ok());
  ASSERT_TRUE(registry.Add(Request(v1::LEARNER)).ok());
  absl::Status s = registry.WaitComplete(absl::ZeroDuration());
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("actor 1 of 2"));
  EXPECT_THAT(s.message(), HasSubstr("verifier 0 of 1"));
  ASSERT_TRUE(registry.Add(Request(v1::ACTOR)).ok());
  ASSERT_TRUE(registry.Add(Request(v1::VERIFIER)).ok());
  EXPECT_TRUE(registry.WaitComplete(absl::ZeroDuration()).ok());
  absl::Status serving = registry.WaitComplete(absl::ZeroDuration(), /*ready=*/true);
  EXPECT_THAT(serving.message(), HasSubstr("did not start serving"));
  for (const char* id : {"actor-0", "actor-1", "learner-0", "verifier-0"}) {
    ASSERT_TRUE(registry.Heartbeat(id).ok());
  }
  EXPECT_TRUE(registry.WaitComplete(absl::ZeroDuration(), /*ready=*/true).ok());
}

TEST(WorkerRegistryTest, WaitCompleteEndsWhenTheFakeClockPassesItsTimeout) {
  FakeEnv env;
  WorkerRegistry registry(Job(1), &env);
  absl::Status status;
  absl::Notification done;
  std::thread waiter([&] {
    status = registry.WaitComplete(absl::Minutes(5));
    done.Notify();
  });
  env.BlockUntilWaiting(1);
  env.Advance(absl::Minutes(5) - absl::Nanoseconds(1));
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  env.Advance(absl::Nanoseconds(1));
  done.WaitForNotification();
  waiter.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("within 5m"));
}

TEST(WorkerRegistryTest, WaitCompleteReturnsWhenTheLastWorkerRegisters) {
  FakeEnv env;
  WorkerRegistry registry(Job(1), &env);
  ASSERT_TRUE(registry.Add(Request(v1::ACTOR)).ok());
  ASSERT_TRUE(registry.Add(Request(v1::LEARNER)).ok());
  std::thread late([&] { ASSERT_TRUE(registry.Add(Request(v1::VERIFIER)).ok()); });
  EXPECT_TRUE(registry.WaitComplete(absl::Minutes(5)).ok());  // fake time never moves
  late.join();
}

constexpr SilenceLimits kLimits{absl::Seconds(5), absl::Seconds(20)};

std::vector<std::string> Ids(const std::vector<WorkerInfo>& workers) {
  std::vector<std::string> ids;
  for (const WorkerInfo& w : workers) ids.push_back(w.id);
  return ids;
}

TEST(WorkerRegistryTest, AWorkerIsStalledAndThenDeadExactlyAtTheLimits) {
  FakeEnv env;
  WorkerRegistry registry(Job(1), &env);
  ASSERT_TRUE(registry.Add(Request(v1::ACTOR)).ok());
  ASSERT_TRUE(registry.Heartbeat("actor-0").ok());
  env.Advance(kLimits.stall);  // silent for exactly the stall limit
  SilenceChanges changes = registry.CheckSilence(kLimits);
  EXPECT_TRUE(changes.stalled.empty());
  env.Advance(absl::Nanoseconds(1));
  changes = registry.CheckSilence(kLimits);
  EXPECT_THAT(Ids(changes.stalled), ::testing::ElementsAre("actor-0"));
  EXPECT_TRUE(changes.dead.empty());
  EXPECT_TRUE(registry.Alive("actor-0"));  // stalled is waited for
  EXPECT_TRUE(registry.CheckSilence(kLimits).stalled.empty());  // reported once
  env.Advance(kLimits.dead - kLimits.stall - absl::Nanoseconds(1));
  EXPECT_TRUE(registry.CheckSilence(kLimits).dead.empty());  // exactly the dead limit
  env.Advance(absl::Nanoseconds(1));
  changes = registry.CheckSilence(kLimits);
  ASSERT_THAT(Ids(changes.dead), ::testing::ElementsAre("actor-0"));
  EXPECT_EQ(changes.dead[0].last_seen, absl::FromUnixSeconds(FakeEnv::kStartUnixSeconds));
  EXPECT_FALSE(registry.Alive("actor-0"));
  EXPECT_TRUE(registry.CheckSilence(kLimits).dead.empty());  // declared once
}

TEST(WorkerRegistryTest, AStalledWorkerThatHeartbeatsAgainRecovers) {
  FakeEnv env;
  WorkerRegistry registry(Job(1), &env);
  ASSERT_TRUE(registry.Add(Request(v1::ACTOR)).ok());
  ASSERT_TRUE(registry.Heartbeat("actor-0").ok());
  env.Advance(absl::Seconds(12));  // e.g. SIGSTOP
  EXPECT_THAT(Ids(registry.CheckSilence(kLimits).stalled), ::testing::ElementsAre("actor-0"));
  ASSERT_TRUE(registry.Heartbeat("actor-0").ok());  // SIGCONT
  SilenceChanges changes = registry.CheckSilence(kLimits);
  EXPECT_THAT(Ids(changes.recovered), ::testing::ElementsAre("actor-0"));
  EXPECT_TRUE(changes.stalled.empty());
  EXPECT_TRUE(registry.CheckSilence(kLimits).recovered.empty());
  env.Advance(absl::Seconds(12));  // stalled again: the count starts from its last heartbeat
  changes = registry.CheckSilence(kLimits);
  EXPECT_THAT(Ids(changes.stalled), ::testing::ElementsAre("actor-0"));
  EXPECT_TRUE(changes.dead.empty());
}

TEST(WorkerRegistryTest, SilentWorkersAreDeclaredDeadOnceAndStayDead) {
  FakeEnv env;
  WorkerRegistry registry(Job(2), &env);
  ASSERT_TRUE(registry.Add(Request(v1::ACTOR)).ok());
  ASSERT_TRUE(registry.Add(Request(v1::ACTOR)).ok());
  // Not serving yet: never stalled or dead for silence.
  env.Advance(absl::Seconds(60));
  SilenceChanges changes = registry.CheckSilence(kLimits);
  EXPECT_TRUE(changes.stalled.empty());
  EXPECT_TRUE(changes.dead.empty());
  ASSERT_TRUE(registry.Heartbeat("actor-0").ok());
  ASSERT_TRUE(registry.Heartbeat("actor-1").ok());
  env.Advance(absl::Seconds(19));
  ASSERT_TRUE(registry.Heartbeat("actor-0").ok());
  env.Advance(absl::Seconds(2));
  changes = registry.CheckSilence(kLimits);
  EXPECT_THAT(Ids(changes.dead), ::testing::ElementsAre("actor-1"));
  EXPECT_TRUE(registry.CheckSilence(kLimits).dead.empty());
  EXPECT_FALSE(registry.Alive("actor-1"));
  EXPECT_TRUE(registry.Alive("actor-0"));
  EXPECT_EQ(registry.Heartbeat("actor-1").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry.Heartbeat("actor-9").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace trellis::scheduler
