#include "model/matmul_rate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>

namespace trellis::model {

double BestSeconds(const std::function<void()>& f, int reps) {
  f();
  double best = 0;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = i == 0 ? s : std::min(best, s);
  }
  return std::max(best, 1e-9);
}

double MeasureMatmulRate(int64_t m, int64_t k, int64_t n) {
  torch::NoGradGuard no_grad;
  // A generator of its own: measuring never moves the run's random draws.
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(1);
  const torch::Tensor a = torch::randn({m, k}, generator);
  const torch::Tensor b = torch::randn({k, n}, generator);
  // Short timings (~5e7 FLOPs, at least 3 products), the best of 7.
  const double flops = 2.0 * m * k * n;
  const int reps = static_cast<int>(std::max(3.0, 5e7 / flops));
  const double best = BestSeconds(
      [&] {
        for (int r = 0; r < reps; ++r) torch::mm(a, b);
      },
      7);
  return flops * reps / best;
}

double MeasureMatmulPeak() {
  return MeasureMatmulRate(kPeakMatmulSize, kPeakMatmulSize, kPeakMatmulSize);
}

}  // namespace trellis::model
