#ifndef TRELLIS_ACTOR_TESTING_ENGINE_ROWS_H_
#define TRELLIS_ACTOR_TESTING_ENGINE_ROWS_H_

// What the engine's tests (actor/engine_test.cc, actor/turn_cache_test.cc)
// share: the small model's vocabulary and padding token, engine options by
// their switches, and the check that two runs sampled the same rows.

#include <cstdint>
#include <string>
#include <vector>

#include "actor/internal/engine.h"
#include "gtest/gtest.h"

namespace trellis::actor::internal {

inline constexpr int32_t kPad = 0;
inline constexpr int kVocab = 24;

inline EngineOptions Options(bool share, bool continuous, int64_t budget = 0) {
  EngineOptions o;
  o.share_prefix = share;
  o.continuous_batching = continuous;
  o.decode_token_budget = budget;
  return o;
}

// The same tokens, ends and stops; log-probs equal to float rounding (other
// batch shapes, padding and cached positions round differently).
inline void ExpectSameRows(const std::vector<EngineRow>& a, const std::vector<EngineRow>& b,
                           const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t r = 0; r < a.size(); ++r) {
    EXPECT_EQ(a[r].tokens, b[r].tokens) << what << ", row " << r;
    EXPECT_EQ(a[r].ended, b[r].ended) << what << ", row " << r;
    EXPECT_EQ(a[r].stop_index, b[r].stop_index) << what << ", row " << r;
    ASSERT_EQ(a[r].logprobs.size(), b[r].logprobs.size()) << what << ", row " << r;
    for (size_t k = 0; k < a[r].logprobs.size(); ++k) {
      EXPECT_NEAR(a[r].logprobs[k], b[r].logprobs[k], 1e-5) << what << ", row " << r;
    }
  }
}

}  // namespace trellis::actor::internal

#endif  // TRELLIS_ACTOR_TESTING_ENGINE_ROWS_H_
