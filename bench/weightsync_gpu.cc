// weightsync_bench --gpu (weightsync_gpu.h). The transports built here
// (cuda_ipc where LibTorch has CUDA, nccl where NCCL was found too) are
// compiled in by the definitions bench/CMakeLists.txt sets.

#include "bench/weightsync_gpu.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/timing.h"
#include "comm/tcp_store.h"
#include "weightsync/registry.h"
#ifdef TRELLIS_BENCH_CUDA_IPC
#include "weightsync/cuda_ipc_transport.h"
#endif
#ifdef TRELLIS_BENCH_NCCL
#include "weightsync/nccl_transport.h"
#endif

namespace trellis::weightsync {
namespace {

using bench::Clock;
using bench::Median;
using bench::Since;

// `bytes` of float32 weights on GPU `device`, in tensors of at most 16 MB.
NamedTensors DeviceWeights(int64_t bytes, int device) {
  NamedTensors w;
  const auto options = torch::TensorOptions().device(torch::kCUDA, device);
  for (int64_t left = bytes / 4, i = 0; left > 0; ++i) {
    const int64_t n = std::min<int64_t>(4'000'000, left);
    w.emplace_back("layer" + std::to_string(i), torch::zeros({n}, options));
    left -= n;
  }
  return w;
}

// Seconds of one cudaMemcpy-class copy of `bytes` on GPU 0 (median).
double CopySeconds(int64_t bytes, int reps) {
  const auto options = torch::TensorOptions().dtype(torch::kByte).device(torch::kCUDA, 0);
  torch::Tensor src = torch::ones({bytes}, options);
  torch::Tensor dst = torch::empty({bytes}, options);
  std::vector<double> s;
  for (int rep = 0; rep <= reps; ++rep) {
    torch::cuda::synchronize();
    const auto t0 = Clock::now();
    dst.copy_(src);
    torch::cuda::synchronize();
    if (rep > 0) s.push_back(Since(t0));
  }
  return Median(s);
}

// Seconds from Publish to the end of the waiting receiver's Receive
// (median), the weights on GPU 0 and dst on GPU `receiver_device`.
absl::StatusOr<double> EndToEndSeconds(Publisher& publisher, Receiver& receiver, int64_t bytes,
                                       int receiver_device, int reps) {
  NamedTensors w = DeviceWeights(bytes, 0);
  NamedTensors dst = DeviceWeights(bytes, receiver_device);
  std::vector<double> s;
  for (int64_t v = 1; v <= reps + 1; ++v) {
    for (auto& [name, t] : w) t.fill_(static_cast<float>(v));
    torch::cuda::synchronize();
    absl::StatusOr<v1::WeightSyncStats> got;
    std::thread waiting([&] { got = receiver.Receive(v, dst, absl::Seconds(120)); });
    // Time for the request to reach the publisher.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto t0 = Clock::now();
    absl::StatusOr<v1::WeightSyncStats> sent = publisher.Publish(v, w);
    waiting.join();
    torch::cuda::synchronize();
    const double seconds = Since(t0);
    if (!sent.ok()) return sent.status();
    if (!got.ok()) return got.status();
    if (v > 1) s.push_back(seconds);  // The first warms up.
  }
  return Median(s);
}

// GPU 0 to GPU `receiver_device` through transport `name`: empty and
// *why set when it cannot run here.
absl::StatusOr<double> TransportSeconds(const TransportRegistry& registry, const std::string& name,
                                        int64_t bytes, int64_t bucket_bytes, int reps,
                                        std::string* why) {
  TransportOptions options;
  options.bucket_bytes = bucket_bytes;
  absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
  options.port = port.ok() ? *port : 0;
  int receiver_device = 0;
  if (name == "nccl") {
    // One NCCL rank per GPU: the receiver needs a second one.
    if (torch::cuda::device_count() < 2) {
      *why = "needs 2 GPUs (one per NCCL rank), found 1";
      return 0.0;
    }
    receiver_device = 1;
  }
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = registry.NewPublisher(name, options);
  if (!publisher.ok()) return publisher.status();
  options.cuda_device = receiver_device;
  absl::StatusOr<std::unique_ptr<Receiver>> receiver = registry.NewReceiver(name, options);
  if (!receiver.ok()) return receiver.status();
  return EndToEndSeconds(**publisher, **receiver, bytes, receiver_device, reps);
}

}  // namespace

int RunGpuBench(int reps, int64_t bucket_bytes, int64_t max_mb) {
  if (!torch::cuda::is_available()) {
    std::printf(
        "weightsync_bench --gpu: skipped: no CUDA device visible "
        "(torch::cuda::is_available() is false)\n");
    return 0;
  }
  TransportRegistry registry;
  std::vector<std::string> names;
#ifdef TRELLIS_BENCH_CUDA_IPC
  if (RegisterCudaIpcTransport(registry).ok()) names.push_back("cuda_ipc");
#endif
#ifdef TRELLIS_BENCH_NCCL
  if (RegisterNcclTransport(registry).ok()) names.push_back("nccl");
#endif
  std::printf(
      "weightsync_bench --gpu: %d reps (median), buckets %lld MiB, %d GPU(s); D2D = one\n"
      "device-to-device copy of the same bytes on GPU 0 (the peak); e2e = from Publish() to\n"
      "the end of the waiting receiver's Receive(), weights and receiver tensors on the GPU\n"
      "(cuda_ipc: both ends in this process, reading the device buckets in place)\n\n",
      reps, static_cast<long long>(bucket_bytes >> 20), torch::cuda::device_count());
  std::printf("%-8s %-10s %9s %10s\n", "size", "transport", "GB/s", "of D2D");
  for (const int64_t mb : {100, 1000}) {
    if (mb > max_mb) continue;
    const int64_t bytes = mb * 1'000'000;
    const double gb = static_cast<double>(bytes) / 1e9;
    const double d2d = gb / CopySeconds(bytes, reps);
    const std::string size = absl::StrFormat("%dMB", mb);
    std::printf("%-8s %-10s %9.2f %9.0f%%\n", size.c_str(), "D2D copy", d2d, 100.0);
    for (const std::string& name : names) {
      std::string why;
      absl::StatusOr<double> s = TransportSeconds(registry, name, bytes, bucket_bytes, reps, &why);
      if (!s.ok()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), s.status().ToString().c_str());
        return 1;
      }
      if (!why.empty()) {
        std::printf("%-8s %-10s skipped: %s\n", size.c_str(), name.c_str(), why.c_str());
        continue;
      }
      std::printf("%-8s %-10s %9.2f %9.0f%%\n", size.c_str(), name.c_str(), gb / *s,
                  100.0 * gb / *s / d2d);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace trellis::weightsync
