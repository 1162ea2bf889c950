#ifndef TRELLIS_MODEL_OFFLOAD_H_
#define TRELLIS_MODEL_OFFLOAD_H_

// Moving tensors' data off their compute device into host memory and back
// (memory.offload_optimizer_state, memory.offload_frozen, the colocated
// placement: docs/gpu.md "CPU offload").
//
// MoveOut keeps each tensor object and swaps its storage for a host copy
// (Tensor::set_data), so every holder of the tensor (an optimizer's state,
// a module's parameters) keeps its reference; the device storage is freed
// when nothing else holds it. MoveIn copies the data back to the device it
// came from, into the same tensors. While out, a tensor is a CPU tensor
// with the same values: reading it works (a checkpoint can copy it);
// computing with device tensors fails loudly, never silently.
//
// Host memory: pinned (page-locked, through LibTorch's CUDA host allocator)
// when the device is CUDA. When the device is the CPU itself the "device"
// is LibTorch's CPU allocator, the memory the ledger's tracker counts
// (ledger/memory_tracker.h): the host copy is then allocated outside it, so
// the role's tracked memory honestly falls by the bytes moved and the copy
// is held as offloaded host memory. The values are copied bit for bit
// either way: offload never changes the math.
//
// Not thread-safe: one role moves its own tensors between its calls.

#include <torch/torch.h>

#include <cstdint>
#include <unordered_set>
#include <vector>

namespace trellis::model {

// What one MoveOut or MoveIn moved.
struct MoveResult {
  int64_t tensors = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

class HostOffload {
 public:
  HostOffload() = default;
  HostOffload(const HostOffload&) = delete;
  HostOffload& operator=(const HostOffload&) = delete;
  HostOffload(HostOffload&&) = default;
  HostOffload& operator=(HostOffload&&) = default;

  // Moves the data of `tensors` into host memory. Undefined and empty
  // tensors, tensors already out and repeats of one tensor are skipped.
  // Throws c10::Error as LibTorch does (call at a LibTorch edge).
  MoveResult MoveOut(const std::vector<torch::Tensor>& tensors);
  // Moves every tensor that is out back to its device, into the same
  // tensors, and frees the host copies. Nothing out: an empty result.
  MoveResult MoveIn();

  bool out() const { return !entries_.empty(); }
  // Bytes held in host memory now.
  int64_t host_bytes() const { return host_bytes_; }

 private:
  struct Entry {
    torch::Tensor tensor;
    c10::Device device;
  };
  std::vector<Entry> entries_;
  std::unordered_set<const void*> held_;
  int64_t host_bytes_ = 0;
};

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_OFFLOAD_H_
