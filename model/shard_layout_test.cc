#include "model/shard_layout.h"

#include "gtest/gtest.h"

namespace trellis::model {
namespace {

TEST(FlatUnitTest, PadsToEqualShardsAndClipsTheLastRank) {
  const FlatUnit unit = MakeFlatUnit("model.layers.0", "F32",
                                     {{"a", {2, 3}}, {"b", {5}}}, /*ranks=*/4);
  EXPECT_EQ(unit.numel, 11);
  EXPECT_EQ(unit.shard_numel, 3);
  ASSERT_EQ(unit.entries.size(), 2u);
  EXPECT_EQ(unit.entries[1].offset, 6);
  EXPECT_EQ(unit.RankRange(0), (std::pair<int64_t, int64_t>{0, 3}));
  EXPECT_EQ(unit.RankRange(3), (std::pair<int64_t, int64_t>{9, 11}));
  const FlatUnit tiny = MakeFlatUnit("outer", "F32", {{"c", {1}}}, 4);
  EXPECT_EQ(tiny.RankRange(2), (std::pair<int64_t, int64_t>{1, 1}));
}

TEST(ModelFlatUnitsTest, OuterFirstThenBlocksEachMatricesThenVectors) {
  const std::vector<TensorInfo> tensors = {
      {"model.embed_tokens.weight", {10, 4}, "F32"},
      {"model.layers.1.mlp.up_proj.weight", {8, 4}, "F32"},
      {"model.layers.0.input_layernorm.weight", {4}, "F32"},
      {"model.layers.0.self_attn.q_proj.weight", {4, 4}, "F32"},
      {"model.norm.weight", {4}, "F32"},
      {"lm_head.weight", {10, 4}, "F32"},
  };
  const std::vector<FlatUnit> units = ModelFlatUnits(tensors, 2);
  ASSERT_EQ(units.size(), 5u);
  EXPECT_EQ(units[0].name, "outer/matrices");
  ASSERT_EQ(units[0].entries.size(), 2u);
  EXPECT_EQ(units[0].entries[1].name, "lm_head.weight");
  EXPECT_EQ(units[0].entries[1].offset, 40);
  EXPECT_EQ(units[1].name, "outer/vectors");
  EXPECT_EQ(units[2].name, "model.layers.0/matrices");
  EXPECT_EQ(units[3].name, "model.layers.0/vectors");
  EXPECT_EQ(units[4].name, "model.layers.1/matrices");
  EXPECT_EQ(units[4].shard_numel, 16);
  EXPECT_EQ(ModelUnitIndex("model.layers.12.mlp.up_proj.weight"), 13u);
  EXPECT_EQ(ModelUnitIndex("model.layersX"), 0u);
}

TEST(TensorParallelSliceTest, ColumnThenRow) {
  EXPECT_EQ(TensorParallelSlice("model.layers.1.self_attn.k_proj.weight", 1, 2).dim, 0);
  EXPECT_EQ(TensorParallelSlice("model.layers.1.self_attn.q_proj.bias", 1, 2).dim, 0);
  EXPECT_EQ(TensorParallelSlice("model.layers.1.self_attn.o_proj.weight", 1, 2).dim, 1);
  EXPECT_EQ(TensorParallelSlice("model.layers.1.mlp.down_proj.weight", 0, 2).dim, 1);
  EXPECT_TRUE(TensorParallelSlice("model.layers.1.mlp.up_proj.lora_A.weight", 0, 2).whole());
  EXPECT_EQ(TensorParallelSlice("model.layers.1.mlp.up_proj.lora_B.weight", 0, 2).dim, 0);
  EXPECT_TRUE(TensorParallelSlice("model.layers.1.mlp.down_proj.lora_B.weight", 0, 2).whole());
  EXPECT_TRUE(TensorParallelSlice("model.embed_tokens.weight", 0, 2).whole());
  EXPECT_TRUE(TensorParallelSlice("model.layers.1.self_attn.q_proj.weight", 0, 1).whole());
}

}  // namespace
}  // namespace trellis::model
