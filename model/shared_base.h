#ifndef TRELLIS_MODEL_SHARED_BASE_H_
#define TRELLIS_MODEL_SHARED_BASE_H_

// LoRA on one base: the frozen base of a LoRA policy, held once in a
// process whose roles all compute on it. The learner builds the policy and
// holds its base here; an embedded actor and the reference then point
// their own models' base tensors at it (the same storage, no copy), so the
// process keeps one base where it used to keep three. The base is frozen:
// no role writes it (the learner trains only the adapters), so the models
// read it from any thread. docs/jobs.md "LoRA on one base".

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "model/safetensors.h"
#include "model/transformer.h"

namespace trellis::model {

class SharedBase {
 public:
  // Holds `model`'s frozen base (Transformer::BaseWeights), once; a later
  // call is ignored.
  void Hold(const Transformer& model);

  // Points each parameter of `model` whose name, shape, dtype and device
  // are a held tensor's at that tensor, freeing the model's own copy.
  // Returns the bytes it now shares (0 when nothing is held). Fails, the
  // model unchanged, when such a parameter's values differ from the held
  // tensor's: the model was not built from this base.
  [[nodiscard]] absl::StatusOr<int64_t> Attach(Transformer& model) const;

  // Whether `weights` are the held base itself: the same names, shapes,
  // dtypes and values (a reference taken before any adapter trained).
  bool IsBase(const NamedTensors& weights) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, torch::Tensor> tensors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_SHARED_BASE_H_
