#ifndef TRELLIS_MODEL_DEVICE_H_
#define TRELLIS_MODEL_DEVICE_H_

// Where a role computes (docs/gpu.md, "Devices and placements"): the CPU,
// or one of the CUDA devices this process sees. The choice is plain data
// here (no LibTorch in this header); model/torch_device.h turns it into a
// torch::Device where tensors are made.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/scheduler.pb.h"

namespace trellis::model {

struct Device {
  v1::RuntimeConfig::Device kind = v1::RuntimeConfig::CPU;
  // The CUDA device's ordinal among those visible (CUDA_VISIBLE_DEVICES);
  // 0 for the CPU.
  int index = 0;

  bool is_cuda() const { return kind == v1::RuntimeConfig::CUDA; }
  // "cpu" or "cuda:INDEX", as LibTorch writes devices.
  std::string ToString() const;
  friend bool operator==(const Device& a, const Device& b) {
    return a.kind == b.kind && a.index == b.index;
  }
};

// How a role's engine is bound: in the run's own process beside the other
// roles (`trellis run`), or as a worker process of its own (`trellis serve`,
// started by `trellis launch` with CUDA_VISIBLE_DEVICES set to its GPUs).
enum class Binding { kEmbedded, kServed };

// The device `role` computes on in a job with runtime.device `job`'s, given
// `visible_cuda` CUDA devices visible to the process. CPU jobs, and the
// verifier, compute on the CPU. A CUDA job's served worker computes on
// cuda:0 (the first of its own GPUs). Embedded, deployment.placement
// disaggregated puts the actor on the last visible device and the learner
// and reference on the first (one device: both on it); colocated puts them
// all on the first. REQUIRES: visible_cuda >= 1 for a CUDA job
// (CheckDeviceVisible).
Device RoleDevice(const v1::JobConfig& job, v1::Role role, Binding binding, int visible_cuda);

// Where each of `role`'s K tensor-parallel ranks computes (K =
// deployment.<role>.tensor_parallel, at least 1; the actor's and the
// reference's). `trellis launch` gives a served replica every rank's GPUs
// when they are on one node, rank 0's first (scheduler::CudaVisibleDevices):
// a served CUDA worker that sees a multiple of K devices puts rank r on the
// first of its own, cuda:(r * visible_cuda / K). Otherwise (the CPU, an
// embedded role, fewer devices) every rank computes on RoleDevice.
std::vector<Device> RankDevices(const v1::JobConfig& job, v1::Role role, Binding binding,
                                int visible_cuda);

// The number of CUDA devices this process sees: 0 when LibTorch was built
// without CUDA, when no driver or device is present, or when
// CUDA_VISIBLE_DEVICES hides them all.
int VisibleCudaDevices();

// RoleDevice and RankDevices with this process's VisibleCudaDevices().
Device RoleDevice(const v1::JobConfig& job, v1::Role role, Binding binding);
std::vector<Device> RankDevices(const v1::JobConfig& job, v1::Role role, Binding binding);

// The one check `trellis run`, `trellis launch` and each served worker make
// before anything is allocated: FailedPrecondition when runtime.device is
// cuda and `visible_cuda` is 0, naming the field, CUDA_VISIBLE_DEVICES and
// whether this LibTorch has CUDA at all. OK for CPU jobs.
[[nodiscard]] absl::Status CheckDeviceVisible(const v1::JobConfig& job, int visible_cuda);
[[nodiscard]] absl::Status CheckDeviceVisible(const v1::JobConfig& job);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_DEVICE_H_
