#include "actor/internal/turn_cache.h"

#include <string>
#include <vector>

#include "actor/internal/engine.h"
#include "actor/testing/engine_rows.h"
#include "gtest/gtest.h"
#include "model/testing/small_model.h"
#include "model/transformer.h"

namespace trellis::actor::internal {
namespace {

google::protobuf::RepeatedField<int32_t> Ids(const std::vector<int32_t>& ids) {
  return google::protobuf::RepeatedField<int32_t>(ids.begin(), ids.end());
}

class TurnCacheTest : public testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(5);
    model_ = model::Transformer(model::testing::SmallConfig(), kVocab);
    model_->eval();
    // Three rows of 10 positions with distinct values.
    source_ = model_->NewCache(3, 10);
    for (auto* tensors : {&source_.keys, &source_.values}) {
      for (torch::Tensor& t : *tensors) t.copy_(torch::randn(t.sizes()));
    }
    source_.length = 10;
  }

  // Bytes of `positions` positions of one row.
  int64_t Bytes(int64_t positions) const { return source_.bytes() / 3 / 10 * positions; }

  model::Transformer model_{nullptr};
  model::KVCache source_;
};

TEST_F(TurnCacheTest, TakesTheLongestProperPrefixOnce) {
  torch::NoGradGuard no_grad;
  TurnCache cache(Bytes(100));
  cache.Put({1, 2, 3, 4}, source_, 1);
  // Equal to an entry is no proper prefix: nothing would be left to run.
  EXPECT_FALSE(cache.Take(Ids({1, 2, 3, 4})).has_value());
  cache.Put({1, 2}, source_, 0);
  EXPECT_EQ(cache.bytes(), Bytes(6));
  std::optional<TurnCache::Entry> taken = cache.Take(Ids({1, 2, 3, 4, 9}));
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  ASSERT_EQ(taken->kv.length, 4);
  for (size_t l = 0; l < source_.keys.size(); ++l) {
    // The row's last four positions.
    EXPECT_TRUE(torch::equal(taken->kv.keys[l][0], source_.keys[l][1].narrow(1, 6, 4)));
    EXPECT_TRUE(torch::equal(taken->kv.values[l][0], source_.values[l][1].narrow(1, 6, 4)));
  }
  EXPECT_EQ(cache.bytes(), Bytes(2));
  // Taken once: {1, 2} is what is left.
  taken = cache.Take(Ids({1, 2, 3, 4, 9}));
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0);
}

// Rows with equal sequences (two responses that stopped alike) share an
// entry, taken once per row.
TEST_F(TurnCacheTest, EqualSequencesShareAnEntryTakenOncePerPut) {
  torch::NoGradGuard no_grad;
  TurnCache cache(Bytes(100));
  cache.Put({1, 2, 3}, source_, 0);
  cache.Put({1, 2, 3}, source_, 1);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes(), Bytes(3));
  EXPECT_TRUE(cache.Take(Ids({1, 2, 3, 4})).has_value());
  EXPECT_TRUE(cache.Take(Ids({1, 2, 3, 5})).has_value());
  EXPECT_FALSE(cache.Take(Ids({1, 2, 3, 4})).has_value());
  EXPECT_EQ(cache.bytes(), 0);
}

TEST_F(TurnCacheTest, KeepsWithinItsBudgetDroppingTheOldest) {
  torch::NoGradGuard no_grad;
  TurnCache cache(Bytes(10));
  cache.Put({1, 1, 1, 1}, source_, 0);
  cache.Put({2, 2, 2, 2}, source_, 1);
  EXPECT_EQ(cache.bytes(), Bytes(8));
  cache.Put({3, 3, 3}, source_, 2);  // 11 > 10: the oldest goes
  EXPECT_EQ(cache.bytes(), Bytes(7));
  EXPECT_FALSE(cache.Take(Ids({1, 1, 1, 1, 5})).has_value());
  EXPECT_TRUE(cache.Take(Ids({2, 2, 2, 2, 5})).has_value());
  // Larger than the whole budget: not kept, and nothing else dropped.
  cache.Put(std::vector<int32_t>(10, 4), source_, 0);
  EXPECT_EQ(cache.size(), 1u);
  cache.Put({5, 5, 5, 5, 5, 5, 5, 5, 5, 5}, source_, 0);  // exactly the budget
  EXPECT_EQ(cache.bytes(), Bytes(10));
  EXPECT_EQ(cache.size(), 1u);
  cache.Clear();
  EXPECT_EQ(cache.bytes(), 0);
  EXPECT_FALSE(cache.Take(Ids({5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 1})).has_value());
}

// Multi-turn through the engine: each turn's prompt is the previous one,
// the row's tokens and an observation, for the rows that ended on a stop.
class TurnsTest : public TurnCacheTest {
 protected:
  EngineResult Run(const v1::GenerateRequest& request, const EngineOptions& options,
                   TurnCache* turns) {
    torch::NoGradGuard no_grad;
    EngineCallbacks callbacks;
    callbacks.is_eos = [](int32_t token) { return token == 23; };
    absl::StatusOr<EngineResult> result =
        RunEngine(*model_, request, kPad, options, callbacks, turns);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : EngineResult();
  }

  // Turn `turn`'s request: prompts 10.. of lengths 2..7, or the rows of
  // `previous` that stopped with an observation of 1..3 tokens; two new
  // prompts besides.
  static v1::GenerateRequest Turn(int turn, const v1::GenerateRequest* previous,
                                  const EngineResult* result) {
    v1::GenerateRequest request;
    request.set_responses_per_prompt(1);
    request.set_seed(100 + turn);
    request.mutable_sampling()->set_temperature(1.0);
    request.mutable_sampling()->set_top_p(0.95f);
    request.mutable_sampling()->set_max_new_tokens(5);
    for (int32_t stop : {1, 2, 4, 5, 7, 8})
      request.mutable_sampling()->add_stop()->add_token_ids(stop);
    for (int p = 0; p < (previous == nullptr ? 8 : 2); ++p) {
      v1::Prompt* prompt = request.add_prompts();
      prompt->set_id(10 * turn + 100 + p);
      for (int k = 0; k < 2 + (p * 5) % 6; ++k) prompt->add_token_ids(6 + (p * 7 + k * 3) % 16);
    }
    if (previous == nullptr) return request;
    for (int r = 0; r < previous->prompts_size(); ++r) {
      const EngineRow& row = result->rows[r];
      if (row.stop_index == 0) continue;
      v1::Prompt* prompt = request.add_prompts();
      *prompt = previous->prompts(r);
      prompt->mutable_token_ids()->Add(row.tokens.begin(), row.tokens.end());
      for (int k = 0; k <= r % 3; ++k) prompt->add_token_ids(9 + k);
    }
    return request;
  }
};

// The samples of every turn are those of a fresh prefill of the whole
// sequence, and only the new tokens (the last sampled token, never fed,
// and the observation) are run for a continued row.
TEST_F(TurnsTest, ContinuedRowsSampleWhatAFullPrefillSamples) {
  for (const auto& [name, options] :
       std::vector<std::pair<std::string, EngineOptions>>{{"default", Options(true, true)},
                                                          {"old engine", Options(false, false)},
                                                          {"budget 2", Options(true, true, 2)}}) {
    TurnCache turns(int64_t{1} << 30);
    v1::GenerateRequest request = Turn(0, nullptr, nullptr);
    EngineResult cached = Run(request, options, &turns);
    ExpectSameRows(cached.rows, Run(request, options, nullptr).rows, name + ", turn 0");
    int continued = 0;
    for (int turn = 1; turn <= 2; ++turn) {
      size_t stopped = 0;
      int64_t kept = 0;
      for (int r = 0; r < request.prompts_size(); ++r) {
        if (cached.rows[r].stop_index == 0) continue;
        ++stopped;
        kept += request.prompts(r).token_ids_size() + cached.rows[r].tokens.size() - 1;
      }
      EXPECT_EQ(turns.size(), stopped) << name;
      const v1::GenerateRequest next = Turn(turn, &request, &cached);
      int64_t all = 0;
      for (const v1::Prompt& p : next.prompts()) all += p.token_ids_size();
      const EngineResult fresh = Run(next, options, nullptr);
      cached = Run(next, options, &turns);
      ExpectSameRows(cached.rows, fresh.rows, name + ", turn " + std::to_string(turn));
      EXPECT_EQ(fresh.prefill_tokens, all) << name;
      EXPECT_EQ(cached.reused_tokens, kept) << name;
      EXPECT_EQ(cached.prefill_tokens, all - kept) << name;
      continued += static_cast<int>(stopped);
      request = next;
    }
    EXPECT_GE(continued, 4) << name;
  }
}

// A budget for about two rows keeps at most that; the rows it dropped are
// prefilled in full, with the same samples.
TEST_F(TurnsTest, ABudgetBoundsTheCacheAndMissesPrefillInFull) {
  const EngineOptions options = Options(true, true);
  const v1::GenerateRequest first = Turn(0, nullptr, nullptr);
  TurnCache unbounded(int64_t{1} << 30);
  const EngineResult all = Run(first, options, &unbounded);
  ASSERT_GE(unbounded.size(), 3u);
  const int64_t budget = unbounded.bytes() / static_cast<int64_t>(unbounded.size()) * 2;
  TurnCache turns(budget);
  const EngineResult kept = Run(first, options, &turns);
  EXPECT_LE(turns.bytes(), budget);
  EXPECT_GT(turns.size(), 0u);
  EXPECT_LT(turns.size(), unbounded.size());
  const v1::GenerateRequest second = Turn(1, &first, &kept);
  const EngineResult fresh = Run(second, options, nullptr);
  const EngineResult some = Run(second, options, &turns);
  const EngineResult every = Run(second, options, &unbounded);
  ExpectSameRows(some.rows, fresh.rows, "some cached");
  ExpectSameRows(every.rows, fresh.rows, "all cached");
  EXPECT_GT(some.reused_tokens, 0);
  EXPECT_LT(some.reused_tokens, every.reused_tokens);
  EXPECT_EQ(some.prefill_tokens + some.reused_tokens, fresh.prefill_tokens);
  EXPECT_LE(turns.bytes(), budget);
}

}  // namespace
}  // namespace trellis::actor::internal
