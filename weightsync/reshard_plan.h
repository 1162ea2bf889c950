#ifndef TRELLIS_WEIGHTSYNC_RESHARD_PLAN_H_
#define TRELLIS_WEIGHTSYNC_RESHARD_PLAN_H_

// Who sends what in a resharding weight sync (docs/parallelism.md): from N
// learner ranks, each holding its flat shard of every unit
// (model/shard_layout.h FlatUnit::RankRange), to K tensor-parallel actor
// ranks, each holding its slice of every tensor (TensorParallelSlice).
// Pure: the same units and K give the same plan on every rank.

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/shard_layout.h"

namespace trellis::weightsync {

// One element range moved from a learner rank to an actor rank.
struct ReshardPiece {
  int unit = 0;     // Index into ReshardPlan::units().
  int entry = 0;    // Index into that unit's entries.
  int64_t src = 0;  // Elements from the start of the learner rank's shard.
  int64_t dst = 0;  // Elements from the start of the actor rank's slice.
  int64_t numel = 0;

  bool operator==(const ReshardPiece&) const = default;
};

// Consecutive pieces of one tensor moved as one strided copy: `rows` rows
// of `row_numel` elements, `src_stride` apart in the shard and back to back
// in the slice (a dim-1 slice's row pieces; a single piece has rows 1).
struct ReshardRun {
  int unit = 0;
  int entry = 0;
  int64_t src = 0;
  int64_t dst = 0;
  int64_t rows = 1;
  int64_t row_numel = 0;
  int64_t src_stride = 0;

  int64_t numel() const { return rows * row_numel; }
};

// The pieces learner rank `learner` (of units[*].ranks) sends actor rank
// `actor` of `actor_ranks`: for each tensor of each unit, in order, the
// intersection of the rank's flat range with the actor rank's slice,
// pieces contiguous in both the shard and the slice coalesced.
// REQUIRES: the units pass ReshardPlan::Make's checks.
std::vector<ReshardPiece> PlanPieces(const std::vector<model::FlatUnit>& units, int learner,
                                     int actor, int actor_ranks);

// `pieces` grouped into strided runs: consecutive pieces of one tensor of
// equal length whose sources are equally spaced and whose destinations are
// back to back.
std::vector<ReshardRun> GroupRuns(const std::vector<ReshardPiece>& pieces);

// The whole plan of one sync, every (learner, actor) pair computed once.
class ReshardPlan {
 public:
  // One tensor as an actor rank holds it.
  struct Slice {
    std::string name;
    std::vector<int64_t> shape;
    c10::ScalarType dtype;
    int unit = 0;
    int entry = 0;
    int64_t numel = 0;

    // Whether move `r` (of this slice's tensor) fills the slice alone.
    bool FilledBy(const ReshardRun& r) const { return r.dst == 0 && r.numel() == numel; }
  };

  // InvalidArgument naming the problem: no units, units over different
  // numbers of learner ranks, actor_ranks < 1, a dtype that is not a
  // safetensors name, a duplicate tensor name, or a sliced dimension that
  // is missing or not divisible by actor_ranks.
  [[nodiscard]] static absl::StatusOr<ReshardPlan> Make(std::vector<model::FlatUnit> units,
                                                        int actor_ranks);

  int learner_ranks() const { return units_.front().ranks; }
  int actor_ranks() const { return actor_ranks_; }
  const std::vector<model::FlatUnit>& units() const { return units_; }
  c10::ScalarType dtype(int unit) const { return dtypes_[unit]; }

  // REQUIRES: 0 <= learner < learner_ranks(), 0 <= actor < actor_ranks().
  const std::vector<ReshardRun>& Runs(int learner, int actor) const {
    return runs_[learner * actor_ranks_ + actor];
  }
  // Runs(learner, actor) with every run of more than `bucket_bytes` split
  // (into groups of rows, or a row into ranges) so that each fits a bucket.
  // Both ends of a link split alike: the pieces are matched by name.
  std::vector<ReshardRun> Moves(int learner, int actor, int64_t bucket_bytes) const;
  // The payload bytes learner rank `learner` sends actor rank `actor`.
  int64_t PairBytes(int learner, int actor) const;
  // Actor rank `actor`'s tensors, in the units' order.
  const std::vector<Slice>& Slices(int actor) const { return slices_[actor]; }
  // Actor rank `actor`'s slice of tensor `entry` of unit `unit`.
  const Slice& SliceOf(int actor, int unit, int entry) const {
    return slices_[actor][unit_first_[unit] + entry];
  }
  // The bytes of actor rank `actor`'s tensors.
  int64_t SliceBytes(int actor) const;
  // The bytes of each learner rank's shards (shard_numel per unit).
  int64_t ShardBytes() const;

 private:
  ReshardPlan() = default;

  std::vector<model::FlatUnit> units_;
  std::vector<c10::ScalarType> dtypes_;
  int actor_ranks_ = 1;
  std::vector<std::vector<ReshardRun>> runs_;  // [learner * K + actor]
  std::vector<std::vector<Slice>> slices_;     // [actor]
  std::vector<size_t> unit_first_;             // [unit]: its first slice
};

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_RESHARD_PLAN_H_
