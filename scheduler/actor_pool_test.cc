#include "scheduler/actor_pool.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::scheduler {
namespace {

// Answers every prompt with responses_per_prompt samples whose text is
// "<prompt id>/<seed>", or fails every call with `fail`. Its decode takes
// the seconds of 100 tokens/s per row in the batch up to `knee` rows.
class FakeActor final : public actor::RolloutWorker {
 public:
  explicit FakeActor(absl::Status fail = absl::OkStatus()) : fail_(std::move(fail)) {}
  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request) override {
    ++calls;
    if (!fail_.ok()) return fail_;
    v1::GenerateResponse response;
    for (const v1::Prompt& p : request.prompts()) {
      asked.push_back(p.id());
      for (int i = 0; i < request.responses_per_prompt(); ++i) {
        v1::Sample* s = response.add_samples();
        s->set_prompt_id(p.id());
        s->set_index(i);
        s->set_response_text(std::to_string(p.id()) + "/" + std::to_string(request.seed()));
      }
    }
    response.set_generated_tokens(response.samples_size());
    response.set_prefill_tokens(request.prompts_size());
    budgets.push_back(request.decode_token_budget());
    const int64_t rows = response.samples_size();
    const int64_t batch = request.decode_token_budget() > 0
                              ? std::min<int64_t>(request.decode_token_budget(), rows)
                              : rows;
    response.set_decode_token_budget(request.decode_token_budget());
    response.set_decode_seconds(static_cast<double>(rows) /
                                (100.0 * static_cast<double>(std::min(batch, knee))));
    return response;
  }
  absl::StatusOr<v1::WeightSyncStats> SyncWeights(int64_t version) override {
    if (!fail_.ok()) return fail_;
    version_ = version;
    v1::WeightSyncStats stats;
    stats.set_version(version);
    stats.set_bytes(100);
    return stats;
  }
  int64_t policy_version() const override { return version_; }
  int calls = 0;
  std::vector<uint64_t> asked;   // prompt ids, every call's in order
  std::vector<int32_t> budgets;  // each call's decode_token_budget
  int64_t knee = 1000;

 private:
  absl::Status fail_;
  int64_t version_ = -1;
};

v1::GenerateRequest Request(int prompts) {
  v1::GenerateRequest r;
  r.set_responses_per_prompt(2);
  r.set_seed(7);
  for (int i = 0; i < prompts; ++i) r.add_prompts()->set_id(100 + i);
  return r;
}

std::vector<ActorPool::Member> Members(std::vector<FakeActor*>& out,
                                       std::vector<absl::Status> fails) {
  std::vector<ActorPool::Member> members;
  for (size_t i = 0; i < fails.size(); ++i) {
    auto actor = std::make_unique<FakeActor>(fails[i]);
    out.push_back(actor.get());
    members.push_back({"actor-" + std::to_string(i), std::move(actor)});
  }
  return members;
}

TEST(ActorPoolTest, OneActorGetsTheWholeRequestAndItsSeed) {
  std::vector<FakeActor*> actors;
  ActorPool pool(Members(actors, {absl::OkStatus()}), nullptr, nullptr, nullptr);
  absl::StatusOr<v1::GenerateResponse> r = pool.Generate(Request(3));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->samples_size(), 6);
  EXPECT_EQ(r->samples(0).response_text(), "100/7");
  EXPECT_EQ(r->samples(5).prompt_id(), 102u);
}

// Rows draw from streams keyed by (seed, prompt id, the id's occurrence in
// the request, ...): every actor gets the request's seed, and the copies of
// a prompt id stay together, in order, so their occurrences are the same.
TEST(ActorPoolTest, EveryShardKeepsTheSeedAndEveryCopyOfAPromptIdGoesTogether) {
  std::vector<FakeActor*> actors;
  ActorPool pool(Members(actors, {absl::OkStatus(), absl::OkStatus()}), nullptr, nullptr, nullptr);
  v1::GenerateRequest request = Request(4);
  request.mutable_prompts(3)->set_id(100);  // 100, 101, 102, 100
  absl::StatusOr<v1::GenerateResponse> r = pool.Generate(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(actors[0]->asked, (std::vector<uint64_t>{100, 101, 100}));
  EXPECT_EQ(actors[1]->asked, (std::vector<uint64_t>{102}));
  ASSERT_EQ(r->samples_size(), 8);
  const std::vector<uint64_t> order = {100, 101, 102, 100};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(r->samples(i).prompt_id(), order[i / 2]) << "request order kept, sample " << i;
    EXPECT_EQ(r->samples(i).response_text(), std::to_string(order[i / 2]) + "/7");
  }
  EXPECT_EQ(r->prefill_tokens(), 4);
  EXPECT_EQ(r->generated_tokens(), 8);
}

// Multi-turn episodes ask for their next turns under the same prompt ids:
// an id answered in the previous call goes to the same actor (its turn
// cache), whatever its position now; a new id fills the emptier shard.
TEST(ActorPoolTest, APromptIdGoesToTheActorThatAnsweredItInThePreviousCall) {
  std::vector<FakeActor*> actors;
  ActorPool pool(Members(actors, {absl::OkStatus(), absl::OkStatus()}), nullptr, nullptr, nullptr);
  ASSERT_TRUE(pool.Generate(Request(4)).ok());
  EXPECT_EQ(actors[0]->asked, (std::vector<uint64_t>{100, 101}));
  EXPECT_EQ(actors[1]->asked, (std::vector<uint64_t>{102, 103}));
  actors[0]->asked.clear();
  actors[1]->asked.clear();

  v1::GenerateRequest next;
  next.set_responses_per_prompt(1);
  next.set_seed(8);
  for (uint64_t id : {103, 100, 102, 200}) next.add_prompts()->set_id(id);
  absl::StatusOr<v1::GenerateResponse> r = pool.Generate(next);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(actors[0]->asked, (std::vector<uint64_t>{100, 200}));
  EXPECT_EQ(actors[1]->asked, (std::vector<uint64_t>{103, 102}));
  ASSERT_EQ(r->samples_size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r->samples(i).prompt_id(), next.prompts(i).id()) << "request order kept";
  }

  // Only the previous call counts: 101 (two calls ago, on actor 0) is new.
  actors[0]->asked.clear();
  actors[1]->asked.clear();
  next.clear_prompts();
  for (uint64_t id : {102, 103, 101}) next.add_prompts()->set_id(id);
  ASSERT_TRUE(pool.Generate(next).ok());
  EXPECT_EQ(actors[0]->asked, (std::vector<uint64_t>{101}));
  EXPECT_EQ(actors[1]->asked, (std::vector<uint64_t>{102, 103}));
}

// A sticky id whose actor died goes to a live one.
TEST(ActorPoolTest, AnIdWhoseActorIsDeadGoesToALiveOne) {
  std::vector<FakeActor*> actors;
  bool first_alive = true;
  ActorPool pool(
      Members(actors, {absl::OkStatus(), absl::OkStatus()}),
      [&](const std::string& id) { return first_alive || id != "actor-0"; }, nullptr, nullptr);
  ASSERT_TRUE(pool.Generate(Request(4)).ok());
  first_alive = false;
  actors[1]->asked.clear();
  ASSERT_TRUE(pool.Generate(Request(4)).ok());
  EXPECT_EQ(actors[0]->calls, 1);
  EXPECT_EQ(actors[1]->asked, (std::vector<uint64_t>{100, 101, 102, 103}));
}

TEST(ActorPoolTest, AFailedActorsShardGoesToALiveOneAndEveryPromptIsAnsweredOnce) {
  std::vector<FakeActor*> actors;
  std::vector<std::string> dead;
  ActorPool pool(Members(actors, {absl::OkStatus(), absl::UnavailableError("connection reset"),
                                  absl::OkStatus()}),
                 nullptr, [&](const std::string& id) { dead.push_back(id); }, nullptr);
  absl::StatusOr<v1::GenerateResponse> r = pool.Generate(Request(9));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->samples_size(), 18);
  std::multiset<uint64_t> ids;
  for (int i = 0; i < r->samples_size(); ++i) {
    ids.insert(r->samples(i).prompt_id());
    EXPECT_EQ(r->samples(i).prompt_id(), 100u + i / 2) << "prompt order kept";
  }
  for (uint64_t id = 100; id < 109; ++id) EXPECT_EQ(ids.count(id), 2u);
  EXPECT_EQ(dead, std::vector<std::string>{"actor-1"});
  EXPECT_EQ(pool.redispatched_prompts(), 3);
  // The failed actor is not asked again.
  ASSERT_TRUE(pool.Generate(Request(4)).ok());
  EXPECT_EQ(actors[1]->calls, 1);
}

TEST(ActorPoolTest, ABadRequestIsNotAWorkerFailure) {
  std::vector<FakeActor*> actors;
  ActorPool pool(Members(actors, {absl::InvalidArgumentError("prompt 3 too long"),
                                  absl::OkStatus()}),
                 nullptr, nullptr, nullptr);
  absl::StatusOr<v1::GenerateResponse> r = pool.Generate(Request(4));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ActorPoolTest, WorkersTheSchedulerDeclaredDeadGetNoWork) {
  std::vector<FakeActor*> actors;
  ActorPool pool(Members(actors, {absl::OkStatus(), absl::OkStatus()}),
                 [](const std::string& id) { return id != "actor-0"; }, nullptr, nullptr);
  ASSERT_TRUE(pool.Generate(Request(4)).ok());
  EXPECT_EQ(actors[0]->calls, 0);
  EXPECT_EQ(actors[1]->calls, 1);
  absl::StatusOr<v1::WeightSyncStats> sync = pool.SyncWeights(3);
  ASSERT_TRUE(sync.ok());
  EXPECT_EQ(sync->bytes(), 100);
  EXPECT_EQ(pool.policy_version(), 3);
}

TEST(ActorPoolTest, NoLiveActorIsUnavailable) {
  std::vector<FakeActor*> actors;
  ActorPool pool(Members(actors, {absl::UnavailableError("gone")}), nullptr, nullptr, nullptr);
  EXPECT_EQ(pool.Generate(Request(2)).status().code(), absl::StatusCode::kUnavailable);
}

// sampling.concurrency AUTO: each actor's bound follows its own throughput
// (here 4 and 8 rows, where its tokens/s stop rising), and the response
// carries their sum; without it the actors get no bound from the pool.
TEST(ActorPoolTest, AutoConcurrencySizesEachActorsBatchOnItsOwnThroughput) {
  std::vector<FakeActor*> actors;
  ActorPool pool(Members(actors, {absl::OkStatus(), absl::OkStatus()}), nullptr, nullptr, nullptr,
                 ConcurrencyOptions{});
  actors[0]->knee = 4;
  actors[1]->knee = 8;
  std::vector<int32_t> sums;
  for (int call = 0; call < 8; ++call) {
    absl::StatusOr<v1::GenerateResponse> r = pool.Generate(Request(16));  // 16 rows an actor
    ASSERT_TRUE(r.ok()) << r.status();
    sums.push_back(r->decode_token_budget());
  }
  EXPECT_EQ(actors[0]->budgets, (std::vector<int32_t>{1, 2, 4, 8, 4, 4, 4, 4}));
  EXPECT_EQ(actors[1]->budgets, (std::vector<int32_t>{1, 2, 4, 8, 16, 8, 8, 8}));
  EXPECT_EQ(sums, (std::vector<int32_t>{2, 4, 8, 16, 20, 12, 12, 12}));

  std::vector<FakeActor*> fixed_actors;
  ActorPool fixed(Members(fixed_actors, {absl::OkStatus(), absl::OkStatus()}), nullptr, nullptr,
                  nullptr);
  absl::StatusOr<v1::GenerateResponse> r = fixed.Generate(Request(16));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->decode_token_budget(), 0);
  EXPECT_EQ(fixed_actors[0]->budgets, std::vector<int32_t>{0});
}

// Members change at call boundaries: the change source is asked at the
// start of each call.
struct Changes {
  std::vector<ActorPool::Member> joining;
  std::vector<std::string> leaving;
  std::vector<std::string> serving;  // as the pool last said
  std::vector<std::string> left;
};

void Watch(ActorPool& pool, Changes& c) {
  pool.SetChangeSource(
      [&c](const std::vector<std::string>& serving) {
        c.serving = serving;
        ActorPool::Changes out{std::move(c.joining), std::move(c.leaving)};
        c.joining.clear();
        c.leaving.clear();
        return out;
      },
      [&c](const std::string& id) { c.left.push_back(id); });
}

TEST(ActorPoolTest, AJoinerLoadsThePoolsVersionBeforeItGetsWork) {
  std::vector<FakeActor*> actors;
  ActorPool pool(Members(actors, {absl::OkStatus()}), nullptr, nullptr, nullptr);
  Changes changes;
  Watch(pool, changes);
  ASSERT_TRUE(pool.SyncWeights(3).ok());
  absl::StatusOr<v1::GenerateResponse> before = pool.Generate(Request(4));
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->actors(), 1);

  auto joiner = std::make_unique<FakeActor>();
  FakeActor* late = joiner.get();
  changes.joining.push_back({"actor-1", std::move(joiner)});
  // New prompt ids: ids answered in the previous call stay with actor-0.
  v1::GenerateRequest next = Request(4);
  for (v1::Prompt& p : *next.mutable_prompts()) p.set_id(p.id() + 100);
  absl::StatusOr<v1::GenerateResponse> after = pool.Generate(next);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(late->policy_version(), 3) << "synced before its first shard";
  EXPECT_EQ(late->asked, (std::vector<uint64_t>{202, 203}));
  EXPECT_EQ(after->actors(), 2);
  EXPECT_EQ(changes.serving, std::vector<std::string>{"actor-0"});
  ASSERT_EQ(after->samples_size(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(after->samples(i).response_text(), std::to_string(200 + i / 2) + "/7");
  }
  // The next SyncWeights reaches it with the others.
  ASSERT_TRUE(pool.SyncWeights(4).ok());
  EXPECT_EQ(late->policy_version(), 4);
  EXPECT_EQ(pool.policy_version(), 4);
}

TEST(ActorPoolTest, AJoinerAtASyncIsLoadedByThatSync) {
  std::vector<FakeActor*> actors;
  ActorPool pool(Members(actors, {absl::OkStatus()}), nullptr, nullptr, nullptr);
  Changes changes;
  Watch(pool, changes);
  auto joiner = std::make_unique<FakeActor>();
  FakeActor* late = joiner.get();
  changes.joining.push_back({"actor-1", std::move(joiner)});
  absl::StatusOr<v1::WeightSyncStats> sync = pool.SyncWeights(5);
  ASSERT_TRUE(sync.ok()) << sync.status();
  EXPECT_EQ(sync->bytes(), 200) << "both actors loaded it";
  EXPECT_EQ(late->policy_version(), 5);
}

TEST(ActorPoolTest, AJoinerThatCannotLoadTheWeightsDoesNotJoin) {
  std::vector<FakeActor*> actors;
  std::vector<std::string> dead;
  ActorPool pool(Members(actors, {absl::OkStatus()}), nullptr,
                 [&](const std::string& id) { dead.push_back(id); }, nullptr);
  Changes changes;
  Watch(pool, changes);
  ASSERT_TRUE(pool.SyncWeights(1).ok());
  changes.joining.push_back(
      {"actor-1", std::make_unique<FakeActor>(absl::UnavailableError("no route"))});
  absl::StatusOr<v1::GenerateResponse> r = pool.Generate(Request(4));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(dead, std::vector<std::string>{"actor-1"});
  EXPECT_EQ(r->actors(), 1);
  EXPECT_EQ(actors[0]->asked.size(), 4u);
  ASSERT_TRUE(pool.Generate(Request(2)).ok());
  EXPECT_EQ(changes.serving, std::vector<std::string>{"actor-0"});
}

// A drained member answered everything it was given; from the next call it
// gets nothing and is reported left, and every prompt is still answered.
TEST(ActorPoolTest, ADrainedMemberLeavesAtTheNextCallAndNoPromptIsLost) {
  std::vector<FakeActor*> actors;
  ActorPool pool(Members(actors, {absl::OkStatus(), absl::OkStatus()}), nullptr, nullptr, nullptr);
  Changes changes;
  Watch(pool, changes);
  ASSERT_TRUE(pool.Generate(Request(4)).ok());
  EXPECT_EQ(actors[1]->calls, 1);
  changes.leaving.push_back("actor-1");
  absl::StatusOr<v1::GenerateResponse> r = pool.Generate(Request(4));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(changes.left, std::vector<std::string>{"actor-1"});
  EXPECT_EQ(actors[1]->calls, 1);
  EXPECT_EQ(r->actors(), 1);
  ASSERT_EQ(r->samples_size(), 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(r->samples(i).prompt_id(), 100u + i / 2);
  ASSERT_TRUE(pool.Generate(Request(2)).ok());
  EXPECT_EQ(changes.serving, std::vector<std::string>{"actor-0"});
}

TEST(ActorPoolTest, TheLastMemberStaysWhenDrainedAndIsToldOnce) {
  std::vector<FakeActor*> actors;
  std::ostringstream log;
  ActorPool pool(Members(actors, {absl::OkStatus()}), nullptr, nullptr, &log);
  Changes changes;
  Watch(pool, changes);
  for (int call = 0; call < 2; ++call) {
    changes.leaving.push_back("actor-0");
    ASSERT_TRUE(pool.Generate(Request(2)).ok());
  }
  EXPECT_TRUE(changes.left.empty());
  EXPECT_EQ(actors[0]->calls, 2);
  EXPECT_EQ(log.str(),
            "actor pool: actor-0 is draining but is the last actor; it stays until another "
            "joins\n");
}

}  // namespace
}  // namespace trellis::scheduler
