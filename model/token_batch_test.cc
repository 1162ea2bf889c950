// Length-bucketed batching: the order that groups like lengths, and the
// row a batch error names.
#include "model/token_batch.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LengthOrderTest, SortsByPromptPlusResponseAndKeepsTiesInOrder) {
  const std::vector<int32_t> p1 = {1}, p3 = {1, 2, 3}, r0 = {}, r2 = {4, 5}, r4 = {4, 5, 6, 7};
  const std::vector<SequencePair> pairs = {{p3, r4}, {p1, r2}, {p3, r0}, {p1, r4}, {p1, r0}};
  // Lengths 7, 3, 3, 5, 1.
  EXPECT_THAT(LengthOrder(pairs), ElementsAre(4, 1, 2, 3, 0));
  EXPECT_TRUE(LengthOrder({}).empty());
}

TEST(LengthOrderTest, AnErrorNamesTheRowByItsIdInTheRequest) {
  const std::vector<int32_t> prompt = {1, 2}, longer = {3, 4, 5, 6, 7};
  const std::vector<SequencePair> pairs = {{prompt, {}}, {prompt, longer}};
  const std::vector<int64_t> ids = {40, 17};
  absl::StatusOr<TokenBatch> batch = MakeTokenBatch(pairs, 0, 4, ids);
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(std::string(batch.status().message()), HasSubstr("row 17"));
  EXPECT_THAT(std::string(MakeTokenBatch(pairs, 0, 4).status().message()), HasSubstr("row 1"));
  // A slice pads to its own longest row.
  EXPECT_EQ(MakeTokenBatch({pairs[0]}, 0, 4)->inputs.size(1), 1);
}

}  // namespace
}  // namespace trellis::model
