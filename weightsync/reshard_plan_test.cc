#include "weightsync/reshard_plan.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "weightsync/testing/reshard_model.h"

namespace trellis::weightsync {
namespace {

using testing::ModelShape;
using testing::ModelUnits;

// The element of `e` (a flat index into the whole tensor) that slice
// element `j` of `s` holds, by unravelling `j` in the slice's shape: an
// independent reference for PlanPieces.
int64_t SourceOf(const model::FlatEntry& e, const model::TensorSlice& s, int64_t j) {
  std::vector<int64_t> shape = e.shape;
  if (!s.whole()) shape[s.dim] /= s.parts;
  std::vector<int64_t> index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = j % shape[d];
    j /= shape[d];
  }
  if (!s.whole()) index[s.dim] += s.index * shape[s.dim];
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * e.shape[d] + index[d];
  return flat;
}

// Units with odd shapes besides the model's: a 3-D dim-1 slice (rows of
// more than one element) and a unit smaller than some rank counts.
std::vector<model::FlatUnit> OddUnits(int ranks) {
  std::vector<model::FlatUnit> units = ModelUnits(ModelShape{2, 6, 6, 12, 5}, ranks);
  units.push_back(model::MakeFlatUnit("model.layers.7", "F32",
                                      {{"model.layers.7.mlp.down_proj.weight", {2, 6, 3}},
                                       {"model.layers.7.self_attn.q_proj.bias", {6}}},
                                      ranks));
  units.push_back(model::MakeFlatUnit("tiny", "BF16", {{"tiny.norm.weight", {3}}}, ranks));
  return units;
}

// Every (N, K): the pieces of all learner ranks write every element of
// every actor rank's slices exactly once, with the element the reference
// says; pieces are coalesced; runs and bucket-sized moves write the same.
TEST(ReshardPlanTest, PiecesCoverEverySliceElementExactlyOnce) {
  for (int n_ranks = 1; n_ranks <= 7; ++n_ranks) {
    for (int k_ranks = 1; k_ranks <= 3; ++k_ranks) {
      SCOPED_TRACE(::testing::Message() << "N=" << n_ranks << " K=" << k_ranks);
      std::vector<model::FlatUnit> units = OddUnits(n_ranks);
      absl::StatusOr<ReshardPlan> plan = ReshardPlan::Make(units, k_ranks);
      ASSERT_TRUE(plan.ok()) << plan.status();
      for (int k = 0; k < k_ranks; ++k) {
        // [unit][entry] -> the unit-relative element each slice element got.
        std::vector<std::vector<std::vector<int64_t>>> from_pieces(units.size());
        std::vector<std::vector<std::vector<int64_t>>> from_moves(units.size());
        for (size_t u = 0; u < units.size(); ++u) {
          for (const model::FlatEntry& e : units[u].entries) {
            const int64_t numel =
                e.numel() / (model::TensorParallelSlice(e.name, k, k_ranks).whole() ? 1 : k_ranks);
            from_pieces[u].emplace_back(numel, -1);
            from_moves[u].emplace_back(numel, -1);
          }
        }
        for (int n = 0; n < n_ranks; ++n) {
          const std::vector<ReshardPiece> pieces = PlanPieces(units, n, k, k_ranks);
          for (size_t i = 0; i < pieces.size(); ++i) {
            const ReshardPiece& p = pieces[i];
            ASSERT_GT(p.numel, 0);
            if (i > 0) {
              const ReshardPiece& q = pieces[i - 1];
              EXPECT_FALSE(q.unit == p.unit && q.entry == p.entry && q.src + q.numel == p.src &&
                           q.dst + q.numel == p.dst)
                  << "piece " << i << " continues the previous one";
            }
            const int64_t base = n * units[p.unit].shard_numel;
            for (int64_t x = 0; x < p.numel; ++x) {
              int64_t& slot = from_pieces[p.unit][p.entry].at(p.dst + x);
              EXPECT_EQ(slot, -1) << "written twice";
              slot = base + p.src + x;
            }
          }
          const std::vector<ReshardRun> moves = plan->Moves(n, k, /*bucket_bytes=*/20);
          for (const ReshardRun& r : moves) {
            EXPECT_LE(r.numel() * (r.unit + 1 == static_cast<int>(units.size()) ? 2 : 4), 20);
            const int64_t base = n * units[r.unit].shard_numel;
            for (int64_t row = 0; row < r.rows; ++row) {
              for (int64_t x = 0; x < r.row_numel; ++x) {
                from_moves[r.unit][r.entry].at(r.dst + row * r.row_numel + x) =
                    base + r.src + row * r.src_stride + x;
              }
            }
          }
        }
        for (size_t u = 0; u < units.size(); ++u) {
          for (size_t i = 0; i < units[u].entries.size(); ++i) {
            const model::FlatEntry& e = units[u].entries[i];
            const model::TensorSlice s = model::TensorParallelSlice(e.name, k, k_ranks);
            for (size_t j = 0; j < from_pieces[u][i].size(); ++j) {
              const int64_t want = e.offset + SourceOf(e, s, static_cast<int64_t>(j));
              ASSERT_EQ(from_pieces[u][i][j], want) << e.name << " element " << j;
              ASSERT_EQ(from_moves[u][i][j], want) << e.name << " element " << j;
            }
          }
        }
      }
    }
  }
}

TEST(ReshardPlanTest, Dim0SliceIsOneRangeAndDim1SliceIsStridedRows) {
  const std::vector<model::FlatUnit> units = {
      model::MakeFlatUnit("model.layers.0", "F32",
                          {{"model.layers.0.self_attn.q_proj.weight", {4, 3}},
                           {"model.layers.0.self_attn.o_proj.weight", {3, 4}}},
                          /*ranks=*/1)};
  const std::vector<ReshardPiece> pieces = PlanPieces(units, 0, 1, 2);
  const std::vector<ReshardPiece> want = {
      {0, 0, 6, 0, 6}, {0, 1, 14, 0, 2}, {0, 1, 18, 2, 2}, {0, 1, 22, 4, 2}};
  EXPECT_EQ(pieces, want);
  const std::vector<ReshardRun> runs = GroupRuns(pieces);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].src, 14);
  EXPECT_EQ(runs[1].rows, 3);
  EXPECT_EQ(runs[1].row_numel, 2);
  EXPECT_EQ(runs[1].src_stride, 4);
  // One actor rank: whole tensors, coalesced across them into one piece
  // per tensor (tensors never merge: each lands in its own slice).
  EXPECT_EQ(PlanPieces(units, 0, 0, 1),
            (std::vector<ReshardPiece>{{0, 0, 0, 0, 12}, {0, 1, 12, 0, 12}}));
}

TEST(ReshardPlanTest, BytesAreEachActorRanksShare) {
  const ModelShape shape{3, 12, 6, 24, 18};
  absl::StatusOr<ReshardPlan> plan = ReshardPlan::Make(ModelUnits(shape, 4), 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Per block: norms whole; q, k, v, o, gate, up, down halved.
  const int64_t h = shape.hidden, i = shape.intermediate;
  const int64_t block = 2 * h + (h * h + 2 * shape.kv * h + h * h + 3 * i * h) / 2;
  const int64_t outer = 2 * shape.vocab * h + h;
  for (int k = 0; k < 2; ++k) {
    int64_t sent = 0;
    for (int n = 0; n < 4; ++n) sent += plan->PairBytes(n, k);
    EXPECT_EQ(sent, 4 * (shape.blocks * block + outer));
    EXPECT_EQ(plan->SliceBytes(k), sent);
  }
}

TEST(ReshardPlanTest, RefusesLayoutsItCannotSplit) {
  EXPECT_EQ(ReshardPlan::Make(ModelUnits(ModelShape{}, 2), 5).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<model::FlatUnit> mixed = ModelUnits(ModelShape{}, 2);
  mixed.back().ranks = 3;
  EXPECT_EQ(ReshardPlan::Make(mixed, 2).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<ReshardPlan> dtype = ReshardPlan::Make(ModelUnits(ModelShape{}, 2, "F12"), 1);
  EXPECT_EQ(dtype.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dtype.status().message().find("F12"), std::string::npos);
  EXPECT_EQ(ReshardPlan::Make({}, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trellis::weightsync
