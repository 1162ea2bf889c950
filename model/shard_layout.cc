#include "model/shard_layout.h"

#include <algorithm>
#include <array>
#include <charconv>

namespace trellis::model {

int64_t FlatEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::pair<int64_t, int64_t> FlatUnit::RankRange(int rank) const {
  const int64_t first = std::min(numel, rank * shard_numel);
  return {first, std::min(numel, first + shard_numel)};
}

FlatUnit MakeFlatUnit(std::string name, std::string dtype,
                      const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
                      int ranks) {
  FlatUnit unit;
  unit.name = std::move(name);
  unit.dtype = std::move(dtype);
  unit.ranks = ranks;
  for (const auto& [tensor, shape] : tensors) {
    FlatEntry entry{tensor, shape, unit.numel};
    unit.numel += entry.numel();
    unit.entries.push_back(std::move(entry));
  }
  unit.shard_numel = std::max<int64_t>(1, (unit.numel + ranks - 1) / ranks);
  return unit;
}

size_t ModelUnitIndex(std::string_view name) {
  constexpr std::string_view kBlocks = "model.layers.";
  if (name.substr(0, kBlocks.size()) != kBlocks) return 0;
  const std::string_view rest = name.substr(kBlocks.size());
  size_t layer = 0;
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
  if (error != std::errc() || end == rest.data()) return 0;
  return layer + 1;
}

std::vector<FlatUnit> ModelFlatUnits(const std::vector<TensorInfo>& tensors, int ranks) {
  using Group = std::vector<const TensorInfo*>;
  std::vector<std::array<Group, 2>> groups;  // [unit][0: matrices, 1: vectors]
  for (const TensorInfo& t : tensors) {
    const size_t u = ModelUnitIndex(t.name);
    if (groups.size() <= u) groups.resize(u + 1);
    groups[u][t.shape.size() >= 2 ? 0 : 1].push_back(&t);
  }
  std::vector<FlatUnit> units;
  for (size_t u = 0; u < groups.size(); ++u) {
    const std::string unit = u == 0 ? "outer" : "model.layers." + std::to_string(u - 1);
    for (int kind = 0; kind < 2; ++kind) {
      const Group& group = groups[u][kind];
      if (group.empty()) continue;
      std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
      for (const TensorInfo* t : group) shapes.emplace_back(t->name, t->shape);
      units.push_back(MakeFlatUnit(unit + (kind == 0 ? "/matrices" : "/vectors"),
                                   group.front()->dtype, shapes, ranks));
    }
  }
  return units;
}

TensorSlice TensorParallelSlice(std::string_view name, int rank, int k) {
  if (k <= 1) return {};
  const auto in = [name](std::string_view part) { return name.find(part) != name.npos; };
  const bool lora_a = in(".lora_A.");
  const bool lora_b = in(".lora_B.");
  // Column parallel: whole heads / MLP columns out; their lora_A reads
  // every input and stays whole.
  if (in(".q_proj.") || in(".k_proj.") || in(".v_proj.") || in(".gate_proj.") ||
      in(".up_proj.")) {
    return lora_a ? TensorSlice{} : TensorSlice{0, k, rank};
  }
  // Row parallel: a slice of the input columns; lora_B writes every output.
  if (in(".o_proj.") || in(".down_proj.")) {
    return lora_b ? TensorSlice{} : TensorSlice{1, k, rank};
  }
  return {};
}

}  // namespace trellis::model
