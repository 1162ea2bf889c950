#include "model/rope.h"

#include <cstdint>

#include <torch/torch.h>

#include "trellis/v1/job.pb.h"

namespace trellis::model {
namespace {

// Llama 3.1's rescaling: wavelengths longer than the original context over
// low_freq_factor are stretched by factor, those shorter than it over
// high_freq_factor kept, and those between interpolated smoothly.
torch::Tensor Llama3Scaled(const torch::Tensor& inv_freq,
                           const trellis::v1::ModelConfig::RopeScaling& s) {
  const double factor = s.factor();
  const double low = s.low_freq_factor();
  const double high = s.high_freq_factor();
  const double original = s.original_max_position_embeddings();
  const double low_freq_wavelen = original / low;
  const double high_freq_wavelen = original / high;
  const torch::Tensor wavelen = 2 * M_PI / inv_freq;
  const torch::Tensor scaled =
      torch::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
  const torch::Tensor smooth = (original / wavelen - low) / (high - low);
  const torch::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  const torch::Tensor medium =
      (wavelen < high_freq_wavelen).logical_not() & (wavelen > low_freq_wavelen).logical_not();
  return torch::where(medium, smoothed, scaled);
}

}  // namespace

torch::Tensor RotaryInverseFrequencies(const trellis::v1::ModelConfig& config,
                                       int64_t head_dim) {
  const torch::Tensor inv_freq =
      1.0 / torch::pow(static_cast<double>(config.rope_theta()),
                       torch::arange(0, head_dim, 2, torch::kFloat32) /
                           static_cast<double>(head_dim));
  switch (config.rope_scaling().type()) {
    case trellis::v1::ModelConfig::RopeScaling::LLAMA3:
      return Llama3Scaled(inv_freq, config.rope_scaling());
    case trellis::v1::ModelConfig::RopeScaling::NONE:
      break;
  }
  return inv_freq;
}

torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& cos,
                          const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor rotated =
      torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

}  // namespace trellis::model
