#include "actor/internal/engine.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "actor/internal/row_key.h"
#include "actor/testing/engine_rows.h"
#include "gtest/gtest.h"
#include "model/testing/small_model.h"
#include "model/transformer.h"

namespace trellis::actor::internal {
namespace {

class EngineTest : public testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(3);
    model_ = model::Transformer(model::testing::SmallConfig(), kVocab);
    model_->eval();
  }

  // Prompts of lengths 2..7 with ids 10, 11, ...; a third of the vocabulary
  // stops sampling, so rows end at many lengths.
  static v1::GenerateRequest Request(int prompts, int n, uint64_t seed, int first = 0) {
    v1::GenerateRequest request;
    request.set_responses_per_prompt(n);
    request.set_seed(seed);
    request.mutable_sampling()->set_temperature(1.0);
    request.mutable_sampling()->set_top_p(0.95f);
    request.mutable_sampling()->set_max_new_tokens(7);
    for (int p = first; p < first + prompts; ++p) {
      v1::Prompt* prompt = request.add_prompts();
      prompt->set_id(10 + p);
      for (int k = 0; k < 2 + (p * 5) % 6; ++k) prompt->add_token_ids(1 + (p * 7 + k * 3) % 20);
    }
    return request;
  }

  EngineResult Run(const v1::GenerateRequest& request, EngineOptions options = {},
                   std::function<absl::Status(int64_t)> stopped = nullptr) {
    torch::NoGradGuard no_grad;
    EngineCallbacks callbacks;
    callbacks.is_eos = [](int32_t token) { return token % 3 == 0; };
    callbacks.stopped = std::move(stopped);
    absl::StatusOr<EngineResult> result = RunEngine(*model_, request, kPad, options, callbacks);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : EngineResult();
  }

  model::Transformer model_{nullptr};
};

TEST_F(EngineTest, RowsEndAtManyLengths) {
  const EngineResult result = Run(Request(6, 4, 1));
  std::set<size_t> lengths;
  for (const EngineRow& row : result.rows) lengths.insert(row.tokens.size());
  EXPECT_GE(lengths.size(), 3u);
}

// A row's draws are keyed by the sample, so a request of 4 prompts samples
// what two requests of 2 sample: the same tokens; the log-probs agree to
// float rounding (other batch shapes and padding round differently).
TEST_F(EngineTest, SamplesDoNotDependOnTheBatchSplit) {
  const EngineResult whole = Run(Request(4, 3, 7));
  const EngineResult first = Run(Request(2, 3, 7, 0));
  const EngineResult second = Run(Request(2, 3, 7, 2));
  std::vector<EngineRow> split = first.rows;
  split.insert(split.end(), second.rows.begin(), second.rows.end());
  ExpectSameRows(whole.rows, split, "split in two");
  EXPECT_EQ(whole.generated_tokens, first.generated_tokens + second.generated_tokens);
  EXPECT_EQ(whole.prefill_tokens, first.prefill_tokens + second.prefill_tokens);
}

TEST_F(EngineTest, SharingAndContinuousBatchingSampleWhatTheOldEngineDid) {
  const v1::GenerateRequest request = Request(5, 4, 11);
  const EngineResult old = Run(request, Options(false, false));
  for (const auto& [name, options] : std::vector<std::pair<std::string, EngineOptions>>{
           {"shared prefix", Options(true, false)},
           {"continuous", Options(false, true)},
           {"both", Options(true, true)},
           {"both, budget 3", Options(true, true, 3)},
           {"continuous, budget 1", Options(false, true, 1)}}) {
    const EngineResult now = Run(request, options);
    ExpectSameRows(old.rows, now.rows, name);
    EXPECT_EQ(now.generated_tokens, old.generated_tokens) << name;
  }
}

TEST_F(EngineTest, CountsLiveTokens) {
  const v1::GenerateRequest request = Request(5, 4, 2);
  int64_t prompt_tokens = 0;
  for (const v1::Prompt& p : request.prompts()) prompt_tokens += p.token_ids_size();
  const EngineResult old = Run(request, Options(false, false));
  const EngineResult now = Run(request);
  EXPECT_EQ(old.prefill_tokens, 4 * prompt_tokens);
  EXPECT_EQ(now.prefill_tokens, prompt_tokens);
  int64_t generated = 0, forwards_needed = 0;
  size_t longest = 0;
  for (const EngineRow& row : now.rows) {
    generated += row.tokens.size();
    forwards_needed += row.tokens.size() - 1;  // the first token comes from the prefill
    longest = std::max(longest, row.tokens.size());
  }
  EXPECT_EQ(now.generated_tokens, generated);
  // Continuous batching decodes live rows only; the old engine decodes every
  // row until the longest ends.
  EXPECT_EQ(now.decode.positions, forwards_needed);
  EXPECT_EQ(old.decode.positions, 20 * static_cast<int64_t>(longest - 1));
  EXPECT_EQ(now.prefill.positions,
            5 * 7);  // 5 prompts padded to the longest (7)
  EXPECT_EQ(old.prefill.positions, 20 * 7);
}

TEST_F(EngineTest, RespectsTheDecodeTokenBudget) {
  const v1::GenerateRequest request = Request(4, 4, 5);
  const EngineResult unlimited = Run(request);
  int64_t going_on = 0;  // rows that need a decode step: not ended at their first token
  for (const EngineRow& row : unlimited.rows) going_on += row.tokens.size() > 1;
  EXPECT_EQ(unlimited.largest_decode_batch, going_on);
  EXPECT_GT(going_on, 5);
  for (int64_t budget : {1, 2, 5}) {
    const EngineResult limited = Run(request, Options(true, true, budget));
    EXPECT_LE(limited.largest_decode_batch, budget);
    EXPECT_EQ(limited.decode.positions, unlimited.decode.positions) << budget;
    ExpectSameRows(unlimited.rows, limited.rows, "budget " + std::to_string(budget));
  }
}

TEST_F(EngineTest, StopsWhenAsked) {
  for (const EngineOptions& options : {Options(false, false), Options(true, true, 3)}) {
    torch::NoGradGuard no_grad;
    EngineCallbacks callbacks;
    callbacks.is_eos = [](int32_t) { return false; };
    std::vector<int64_t> polled;
    callbacks.stopped = [&polled](int64_t steps) {
      polled.push_back(steps);
      return steps >= 3 ? absl::CancelledError("gone") : absl::OkStatus();
    };
    absl::StatusOr<EngineResult> result =
        RunEngine(*model_, Request(3, 2, 1), kPad, options, callbacks);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(polled, (std::vector<int64_t>{1, 2, 3}));
  }
}

// The length at which `tokens` first end with one of `stops`, and 1 + its
// index; {tokens.size(), 0} when none does.
std::pair<size_t, int32_t> FirstStop(const std::vector<int32_t>& tokens,
                                     const std::vector<std::vector<int32_t>>& stops) {
  for (size_t end = 1; end <= tokens.size(); ++end) {
    for (size_t i = 0; i < stops.size(); ++i) {
      const std::vector<int32_t>& stop = stops[i];
      if (stop.size() <= end &&
          std::equal(stop.begin(), stop.end(), tokens.begin() + (end - stop.size()))) {
        return {end, static_cast<int32_t>(i + 1)};
      }
    }
  }
  return {tokens.size(), 0};
}

// A stop sequence ends its row where the response first ends with it (kept
// in the row); every row's tokens are the ones it drew without the stops, up
// to there, whatever the options: an ended row changes no other row.
TEST_F(EngineTest, StopSequencesEndRowsAndLeaveTheOthersAlone) {
  v1::GenerateRequest request = Request(5, 4, 13);
  const EngineResult free = Run(request);
  // Stops taken from the samples: a two-token one and a one-token one.
  std::vector<std::vector<int32_t>> stops;
  for (const EngineRow& row : free.rows) {
    if (row.tokens.size() >= 4 && stops.empty()) stops.push_back({row.tokens[1], row.tokens[2]});
  }
  ASSERT_EQ(stops.size(), 1u);
  stops.push_back({free.rows.back().tokens.back()});
  for (const auto& stop : stops) {
    request.mutable_sampling()->add_stop()->mutable_token_ids()->Add(stop.begin(), stop.end());
  }
  int stopped = 0;
  for (const EngineOptions& options :
       {Options(false, false), Options(true, true), Options(true, true, 2)}) {
    const EngineResult now = Run(request, options);
    ASSERT_EQ(now.rows.size(), free.rows.size());
    stopped = 0;
    for (size_t r = 0; r < now.rows.size(); ++r) {
      const auto [length, index] = FirstStop(free.rows[r].tokens, stops);
      const std::vector<int32_t> expected(free.rows[r].tokens.begin(),
                                          free.rows[r].tokens.begin() + length);
      EXPECT_EQ(now.rows[r].tokens, expected) << "row " << r;
      EXPECT_EQ(now.rows[r].stop_index, index) << "row " << r;
      EXPECT_EQ(now.rows[r].ended, index > 0 || free.rows[r].ended) << "row " << r;
      stopped += index > 0;
    }
  }
  EXPECT_GE(stopped, 2);
}

// Two copies of a prompt id in one request (a stream's epoch boundary) are
// different samples: the copy's occurrence is part of its key.
TEST_F(EngineTest, RepeatedPromptIdsDrawApart) {
  v1::GenerateRequest request = Request(1, 4, 9);
  *request.add_prompts() = request.prompts(0);
  const EngineResult result = Run(request);
  bool differ = false;
  for (int i = 0; i < 4; ++i) differ = differ || result.rows[i].tokens != result.rows[4 + i].tokens;
  EXPECT_TRUE(differ);
  EXPECT_EQ(Occurrences(request.prompts()), (std::vector<uint64_t>{0, 1}));
}

// Each prompt is reported once, as soon as its longest row ends (after
// that row's length - 1 decode forwards), with its final rows, while the
// other prompts' rows may still decode; with and without continuous
// batching.
TEST_F(EngineTest, ReportsEachGroupWhenItsRowsHaveEnded) {
  const v1::GenerateRequest request = Request(6, 2, 5);
  for (const bool continuous : {true, false}) {
    SCOPED_TRACE(continuous ? "continuous batching" : "one batch");
    EngineOptions options;
    options.continuous_batching = continuous;
    int64_t forwards = 0;                               // decode forwards started so far
    std::vector<std::pair<int64_t, int64_t>> reported;  // prompt, forwards
    std::vector<std::vector<EngineRow>> groups(request.prompts_size());
    EngineCallbacks callbacks;
    callbacks.is_eos = [](int32_t token) { return token % 3 == 0; };
    callbacks.stopped = [&](int64_t step) {
      forwards = step;
      return absl::OkStatus();
    };
    callbacks.group_done = [&](int64_t prompt, const std::vector<EngineRow>& rows) {
      reported.emplace_back(prompt, forwards);
      groups[prompt] = {rows.begin() + prompt * 2, rows.begin() + prompt * 2 + 2};
    };
    torch::NoGradGuard no_grad;
    absl::StatusOr<EngineResult> result = RunEngine(*model_, request, kPad, options, callbacks);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(reported.size(), 6u);
    std::set<int64_t> prompts;
    int64_t earliest = result->decode.forwards;
    for (const auto& [prompt, at] : reported) {
      prompts.insert(prompt);
      const size_t longest = std::max(result->rows[prompt * 2].tokens.size(),
                                      result->rows[prompt * 2 + 1].tokens.size());
      EXPECT_EQ(at, static_cast<int64_t>(longest) - 1) << "prompt " << prompt;
      ExpectSameRows(groups[prompt],
                     std::vector<EngineRow>(result->rows.begin() + prompt * 2,
                                            result->rows.begin() + prompt * 2 + 2),
                     "reported group");
      earliest = std::min(earliest, at);
    }
    EXPECT_EQ(prompts.size(), 6u);
    EXPECT_LT(earliest, result->decode.forwards);  // before the last rows ended
  }
}

// A row as an actor returns it (LocalActor's sample), to resume from.
v1::Sample AsSample(const EngineRow& row) {
  v1::Sample sample;
  sample.mutable_response_tokens()->Add(row.tokens.begin(), row.tokens.end());
  sample.mutable_logprobs()->Add(row.logprobs.begin(), row.logprobs.end());
  sample.set_stop_index(row.stop_index);
  sample.set_unfinished(row.unfinished);
  sample.set_truncated(!row.ended && !row.unfinished);
  return sample;
}

// Partial rollout: a request stopped once 2 of its 6 prompts are done,
// then resumed (on the same weights, under another request seed) samples
// exactly the rows one uninterrupted request does.
TEST_F(EngineTest, PausedRowsResumeToTheRowsOfAnUnpausedRun) {
  for (const auto& [name, options] : std::vector<std::pair<std::string, EngineOptions>>{
           {"shared, continuous", Options(true, true)},
           {"budget 4", Options(true, true, 4)},
           {"padded batch", Options(false, false)}}) {
    const EngineResult whole = Run(Request(6, 3, 5), options);
    v1::GenerateRequest paused_request = Request(6, 3, 5);
    paused_request.set_finish_prompts(2);
    const EngineResult paused = Run(paused_request, options);
    int64_t done = 0, unfinished = 0;
    for (int p = 0; p < 6; ++p) {
      bool all = true;
      for (int r = p * 3; r < p * 3 + 3; ++r) {
        all = all && !paused.rows[r].unfinished;
        unfinished += paused.rows[r].unfinished;
      }
      done += all;
    }
    EXPECT_GE(done, 2) << name;
    EXPECT_GT(unfinished, 0) << name;
    v1::GenerateRequest resumed = Request(6, 3, 99);
    for (int p = 0; p < 6; ++p) {
      v1::Prompt* prompt = resumed.mutable_prompts(p);
      prompt->set_resume_seed(5);
      for (int r = p * 3; r < p * 3 + 3; ++r) *prompt->add_resume() = AsSample(paused.rows[r]);
    }
    const EngineResult rest = Run(resumed, options);
    ExpectSameRows(whole.rows, rest.rows, name);
    for (const EngineRow& row : rest.rows) EXPECT_FALSE(row.unfinished) << name;
    EXPECT_EQ(paused.generated_tokens + rest.generated_tokens, whole.generated_tokens) << name;
  }
}

// A prompt's min_new_tokens keeps its rows going past their ends; the
// other prompts' rows are those of a request without it.
TEST_F(EngineTest, MinNewTokensLengthensOnlyItsPromptsRows) {
  const EngineResult plain = Run(Request(4, 2, 3));
  v1::GenerateRequest request = Request(4, 2, 3);
  request.mutable_prompts(1)->set_min_new_tokens(7);
  const EngineResult longer = Run(request);
  for (int r = 2; r < 4; ++r) EXPECT_EQ(longer.rows[r].tokens.size(), 7u) << "row " << r;
  std::vector<EngineRow> others = longer.rows, expected = plain.rows;
  others.erase(others.begin() + 2, others.begin() + 4);
  expected.erase(expected.begin() + 2, expected.begin() + 4);
  ExpectSameRows(expected, others, "other prompts");
}

TEST(RowKeyTest, UniformsAreKeyedByEveryField) {
  const RowKey key{1, 2, 0, 3};
  const double u = RowUniform(key, 4);
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
  EXPECT_EQ(u, RowUniform(key, 4));
  EXPECT_NE(u, RowUniform(key, 5));
  EXPECT_NE(u, RowUniform({2, 2, 0, 3}, 4));
  EXPECT_NE(u, RowUniform({1, 3, 0, 3}, 4));
  EXPECT_NE(u, RowUniform({1, 2, 1, 3}, 4));
  EXPECT_NE(u, RowUniform({1, 2, 0, 4}, 4));
}

}  // namespace
}  // namespace trellis::actor::internal
