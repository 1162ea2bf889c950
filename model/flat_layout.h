#ifndef TRELLIS_MODEL_FLAT_LAYOUT_H_
#define TRELLIS_MODEL_FLAT_LAYOUT_H_

// The memory.zero_stage 2 and 3 layout (shard_layout.h ModelFlatUnits) of
// a model's own tensors: what a sharded learner holds and what a resharding
// weight sync's two ends plan their moves by (docs/parallelism.md).

#include <vector>

#include "model/lora.h"
#include "model/safetensors.h"
#include "model/safetensors_dtypes.h"
#include "model/shard_layout.h"

namespace trellis::model {

// The layout of `tensors` (TransformerImpl::NamedWeights's, in its order)
// over `ranks` ranks, LoRA's adapters left out (they stay whole).
inline std::vector<FlatUnit> FlatUnitsOf(const NamedTensors& tensors, int ranks) {
  std::vector<TensorInfo> infos;
  for (const auto& [name, t] : tensors) {
    if (IsAdapterName(name)) continue;
    const char* dtype = SafetensorsDtypeName(t.scalar_type());
    infos.push_back({name, t.sizes().vec(), dtype != nullptr ? dtype : "?"});
  }
  return ModelFlatUnits(infos, ranks);
}

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_FLAT_LAYOUT_H_
