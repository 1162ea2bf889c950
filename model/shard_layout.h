#ifndef TRELLIS_MODEL_SHARD_LAYOUT_H_
#define TRELLIS_MODEL_SHARD_LAYOUT_H_

// How a model's tensors are split across ranks, as plain data (no
// LibTorch), so that both sides of a resharding weight sync can compute
// who holds what (docs/parallelism.md):
//  - a learner of memory.zero_stage 2 or 3 keeps each unit's tensors (one
//    block's, or the embedding, final norm and head) back to back in a
//    flat buffer, padded so that each of its ranks holds an equal,
//    contiguous shard;
//  - a tensor-parallel actor or reference rank holds a slice of each
//    block's projections along one dimension (column-then-row: whole query
//    and key/value heads and MLP columns out, the output projections' input
//    columns in) and the rest whole.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trellis::model {

// One tensor in a unit's flat buffer.
struct FlatEntry {
  std::string name;             // Hugging Face name
  std::vector<int64_t> shape;
  int64_t offset = 0;           // elements from the start of the buffer
  int64_t numel() const;
};

// A unit's tensors of one dtype back to back from offset 0, padded with
// zeros to ranks * shard_numel elements; rank r holds the elements
// [r * shard_numel, (r + 1) * shard_numel).
struct FlatUnit {
  std::string name;   // "model.layers.3", or "outer" for the rest
  std::string dtype;  // safetensors' name: "F32", "BF16"
  std::vector<FlatEntry> entries;
  int64_t numel = 0;        // the entries' elements, without padding
  int64_t shard_numel = 0;  // ceil(numel / ranks), at least 1
  int ranks = 1;

  // The element range [first, second) of the flat buffer that rank `rank`
  // holds, clipped to numel (empty for a rank holding only padding).
  std::pair<int64_t, int64_t> RankRange(int rank) const;
};

// The unit of `tensors` (name and shape, in order) over `ranks` ranks.
// REQUIRES: ranks >= 1.
FlatUnit MakeFlatUnit(std::string name, std::string dtype,
                      const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
                      int ranks);

// A model tensor as a layout sees it: its Hugging Face name, shape and
// safetensors dtype name.
struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
};

// How a learner of memory.zero_stage 2 or 3 lays `tensors` (a model's, in
// its order, LoRA's adapters left out) over `ranks` ranks: one unit per
// block ("model.layers.<i>", in block order) after "outer" (every other
// tensor: embedding, final norm, head); each unit's matrices (two or more
// dimensions, which take weight decay) then its vectors, each group a
// FlatUnit named "<unit>/matrices" or "<unit>/vectors" of its first
// tensor's dtype (an empty group has none). Both ends of a resharding
// weight sync compute it from the same model. REQUIRES: ranks >= 1.
std::vector<FlatUnit> ModelFlatUnits(const std::vector<TensorInfo>& tensors, int ranks);

// The unit ModelFlatUnits puts the tensor `name` in: 1 + its block's index,
// or 0 for outer.
size_t ModelUnitIndex(std::string_view name);

// The part of a tensor that tensor-parallel rank `index` of `parts` holds.
struct TensorSlice {
  // The dimension split into `parts` equal contiguous pieces, the rank
  // holding piece `index`; -1: the whole tensor on every rank.
  int dim = -1;
  int parts = 1;
  int index = 0;

  bool whole() const { return dim < 0 || parts == 1; }
};

// The slice of the Hugging Face-named tensor `name` that rank `rank` of a
// tensor-parallel group of `k` holds: q_proj, k_proj, v_proj, gate_proj and
// up_proj (weights, biases and LoRA's lora_B) along dim 0; o_proj and
// down_proj (weights and LoRA's lora_A) along dim 1; everything else
// (embedding, norms, head, the other adapter halves) whole.
TensorSlice TensorParallelSlice(std::string_view name, int rank, int k);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_SHARD_LAYOUT_H_
