#ifndef TRELLIS_MODEL_TORCH_COMPAT_H_
#define TRELLIS_MODEL_TORCH_COMPAT_H_

// The one place where Trellis's code differs between LibTorch versions:
// Debian's 1.13 (the default build) and PyPI's 2.x (TRELLIS_TORCH=pypi;
// docs/libtorch.md). Everything else compiles against both as written.

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <torch/version.h>

#include <cstddef>
#include <optional>
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#include <ATen/ops/scaled_dot_product_attention.h>
#define TRELLIS_FUSED_ATTENTION 1
#endif
#if TORCH_VERSION_MAJOR < 2
#include <c10/util/string_utils.h>

#include <string>
#endif

namespace trellis::model {

// A c10::Allocator that implements AllocateBytes. c10::Allocator::allocate
// is const in LibTorch 1.x and not in 2.x, which also adds the pure
// copy_data (here plain memcpy, as LibTorch's CPU allocator does).
class AllocatorBase : public c10::Allocator {
 public:
#if TORCH_VERSION_MAJOR >= 2
  c10::DataPtr allocate(size_t n) override { return AllocateBytes(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override { return AllocateBytes(n); }
#endif

 protected:
  virtual c10::DataPtr AllocateBytes(size_t n) const = 0;
};

// The key of a parameter's entry in torch::optim::Optimizer::state(): its
// TensorImpl's address, as text in LibTorch 1.x and as the pointer in 2.x.
#if TORCH_VERSION_MAJOR >= 2
using OptimizerStateKey = void*;
inline OptimizerStateKey OptimizerStateKeyOf(const at::Tensor& param) {
  return param.unsafeGetTensorImpl();
}
#else
using OptimizerStateKey = std::string;
inline OptimizerStateKey OptimizerStateKeyOf(const at::Tensor& param) {
  return c10::guts::to_string(param.unsafeGetTensorImpl());
}
#endif

// Attention through LibTorch's scaled_dot_product_attention (2.5 and later:
// flash and memory-efficient kernels on CUDA, a fused kernel on the CPU),
// or nothing where this LibTorch has none with grouped-query heads (1.x:
// the caller computes it itself). q: [B, H, T, hd]; k, v: [B, KV, S, hd]
// with KV dividing H; bias: additive, broadcastable to [B, H, T, S], or
// undefined for plain causal attention (T == S).
inline std::optional<at::Tensor> FusedAttention(const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v, const at::Tensor& bias,
                                                double scale) {
#ifdef TRELLIS_FUSED_ATTENTION
  return at::scaled_dot_product_attention(
      q, k, v, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt,
      /*dropout_p=*/0.0, /*is_causal=*/!bias.defined(), scale, /*enable_gqa=*/true);
#else
  (void)q, (void)k, (void)v, (void)bias, (void)scale;
  return std::nullopt;
#endif
}

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_TORCH_COMPAT_H_
