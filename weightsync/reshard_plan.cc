#include "weightsync/reshard_plan.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/safetensors_dtypes.h"

namespace trellis::weightsync {
namespace {

// A slice as rows: `outer` blocks of `dim_numel` elements in the tensor, of
// which the rank holds `chunk` elements starting `first` into each block.
struct SliceRows {
  int64_t outer = 1;
  int64_t dim_numel = 0;
  int64_t first = 0;
  int64_t chunk = 0;
};

SliceRows RowsOf(const model::FlatEntry& e, const model::TensorSlice& s) {
  const int64_t numel = e.numel();
  if (s.whole()) return {1, numel, 0, numel};
  int64_t outer = 1;
  for (int d = 0; d < s.dim; ++d) outer *= e.shape[d];
  const int64_t dim_numel = outer == 0 ? 0 : numel / outer;
  const int64_t chunk = dim_numel / s.parts;
  return {outer, dim_numel, s.index * chunk, chunk};
}

// Appends `p`, or extends the last piece when `p` continues it in both the
// shard and the slice.
void Append(std::vector<ReshardPiece>& out, const ReshardPiece& p) {
  if (p.numel == 0) return;
  if (!out.empty()) {
    ReshardPiece& last = out.back();
    if (last.unit == p.unit && last.entry == p.entry && last.src + last.numel == p.src &&
        last.dst + last.numel == p.dst) {
      last.numel += p.numel;
      return;
    }
  }
  out.push_back(p);
}

std::vector<int64_t> SliceShape(const model::FlatEntry& e, const model::TensorSlice& s) {
  std::vector<int64_t> shape = e.shape;
  if (!s.whole()) shape[s.dim] /= s.parts;
  return shape;
}

absl::Status CheckEntry(const model::FlatEntry& e, int actor_ranks) {
  for (int k = 0; k < actor_ranks; ++k) {
    const model::TensorSlice s = model::TensorParallelSlice(e.name, k, actor_ranks);
    if (s.whole()) continue;
    if (s.dim >= static_cast<int>(e.shape.size()) || e.shape[s.dim] % s.parts != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reshard: tensor '", e.name, "' of shape [", absl::StrJoin(e.shape, ", "),
                       "] cannot be split in ", s.parts, " along dim ", s.dim));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<ReshardPiece> PlanPieces(const std::vector<model::FlatUnit>& units, int learner,
                                     int actor, int actor_ranks) {
  std::vector<ReshardPiece> out;
  for (size_t u = 0; u < units.size(); ++u) {
    const model::FlatUnit& unit = units[u];
    const auto [lo, hi] = unit.RankRange(learner);
    for (size_t i = 0; i < unit.entries.size(); ++i) {
      const model::FlatEntry& e = unit.entries[i];
      const int64_t begin = std::max(lo, e.offset);
      const int64_t end = std::min(hi, e.offset + e.numel());
      if (begin >= end) continue;
      const SliceRows r = RowsOf(e, model::TensorParallelSlice(e.name, actor, actor_ranks));
      if (r.chunk == 0) continue;
      // Only the row blocks that meet [begin, end).
      const int64_t o_first = (begin - e.offset) / r.dim_numel;
      const int64_t o_last = std::min(r.outer - 1, (end - 1 - e.offset) / r.dim_numel);
      for (int64_t o = o_first; o <= o_last; ++o) {
        const int64_t start = e.offset + o * r.dim_numel + r.first;
        const int64_t a = std::max(begin, start);
        const int64_t b = std::min(end, start + r.chunk);
        if (a >= b) continue;
        Append(out, {static_cast<int>(u), static_cast<int>(i), a - lo, o * r.chunk + (a - start),
                     b - a});
      }
    }
  }
  return out;
}

std::vector<ReshardRun> GroupRuns(const std::vector<ReshardPiece>& pieces) {
  std::vector<ReshardRun> runs;
  for (const ReshardPiece& p : pieces) {
    if (!runs.empty()) {
      ReshardRun& r = runs.back();
      const bool same = r.unit == p.unit && r.entry == p.entry && r.row_numel == p.numel &&
                        r.dst + r.numel() == p.dst;
      const int64_t stride = p.src - (r.src + (r.rows - 1) * r.src_stride);
      if (same && (r.rows == 1 ? stride > 0 : stride == r.src_stride)) {
        r.src_stride = stride;
        ++r.rows;
        continue;
      }
    }
    runs.push_back({p.unit, p.entry, p.src, p.dst, 1, p.numel, p.numel});
  }
  return runs;
}

absl::StatusOr<ReshardPlan> ReshardPlan::Make(std::vector<model::FlatUnit> units, int actor_ranks) {
  if (units.empty()) return absl::InvalidArgumentError("reshard: no units");
  if (actor_ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshard: actor_ranks must be >= 1, got ", actor_ranks));
  }
  ReshardPlan plan;
  std::set<std::string> names;
  for (const model::FlatUnit& unit : units) {
    if (unit.ranks != units.front().ranks || unit.ranks < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reshard: unit '", unit.name, "' is split over ", unit.ranks, " learner ranks, unit '",
          units.front().name, "' over ", units.front().ranks));
    }
    const std::optional<c10::ScalarType> dtype = model::SafetensorsDtypeOf(unit.dtype);
    if (!dtype.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("reshard: unit '", unit.name, "' has unknown dtype '", unit.dtype, "'"));
    }
    plan.dtypes_.push_back(*dtype);
    for (const model::FlatEntry& e : unit.entries) {
      if (!names.insert(e.name).second) {
        return absl::InvalidArgumentError(absl::StrCat("reshard: tensor '", e.name, "' twice"));
      }
      if (absl::Status s = CheckEntry(e, actor_ranks); !s.ok()) return s;
    }
  }
  plan.actor_ranks_ = actor_ranks;
  plan.units_ = std::move(units);
  for (int n = 0; n < plan.learner_ranks(); ++n) {
    for (int k = 0; k < actor_ranks; ++k) {
      plan.runs_.push_back(GroupRuns(PlanPieces(plan.units_, n, k, actor_ranks)));
    }
  }
  size_t first = 0;
  for (const model::FlatUnit& unit : plan.units_) {
    plan.unit_first_.push_back(first);
    first += unit.entries.size();
  }
  for (int k = 0; k < actor_ranks; ++k) {
    std::vector<Slice>& slices = plan.slices_.emplace_back();
    for (size_t u = 0; u < plan.units_.size(); ++u) {
      for (size_t i = 0; i < plan.units_[u].entries.size(); ++i) {
        const model::FlatEntry& e = plan.units_[u].entries[i];
        const model::TensorSlice slice = model::TensorParallelSlice(e.name, k, actor_ranks);
        slices.push_back({e.name, SliceShape(e, slice), plan.dtypes_[u], static_cast<int>(u),
                          static_cast<int>(i),
                          slice.whole() ? e.numel() : e.numel() / slice.parts});
      }
    }
  }
  return plan;
}

std::vector<ReshardRun> ReshardPlan::Moves(int learner, int actor, int64_t bucket_bytes) const {
  std::vector<ReshardRun> moves;
  for (const ReshardRun& r : Runs(learner, actor)) {
    const int64_t most = std::max<int64_t>(
        1, bucket_bytes / static_cast<int64_t>(c10::elementSize(dtypes_[r.unit])));
    if (r.numel() <= most) {
      moves.push_back(r);
    } else if (r.row_numel <= most) {
      const int64_t rows = most / r.row_numel;
      for (int64_t first = 0; first < r.rows; first += rows) {
        ReshardRun part = r;
        part.src = r.src + first * r.src_stride;
        part.dst = r.dst + first * r.row_numel;
        part.rows = std::min(rows, r.rows - first);
        moves.push_back(part);
      }
    } else {
      for (int64_t row = 0; row < r.rows; ++row) {
        for (int64_t at = 0; at < r.row_numel; at += most) {
          const int64_t n = std::min(most, r.row_numel - at);
          moves.push_back({r.unit, r.entry, r.src + row * r.src_stride + at,
                           r.dst + row * r.row_numel + at, 1, n, n});
        }
      }
    }
  }
  return moves;
}

int64_t ReshardPlan::PairBytes(int learner, int actor) const {
  int64_t bytes = 0;
  for (const ReshardRun& r : Runs(learner, actor)) {
    bytes += r.numel() * static_cast<int64_t>(c10::elementSize(dtypes_[r.unit]));
  }
  return bytes;
}

int64_t ReshardPlan::SliceBytes(int actor) const {
  int64_t bytes = 0;
  for (const Slice& s : Slices(actor)) {
    bytes += s.numel * static_cast<int64_t>(c10::elementSize(s.dtype));
  }
  return bytes;
}

int64_t ReshardPlan::ShardBytes() const {
  int64_t bytes = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    bytes += units_[u].shard_numel * static_cast<int64_t>(c10::elementSize(dtypes_[u]));
  }
  return bytes;
}

}  // namespace trellis::weightsync
