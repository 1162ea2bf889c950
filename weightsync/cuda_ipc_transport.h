#ifndef TRELLIS_WEIGHTSYNC_CUDA_IPC_TRANSPORT_H_
#define TRELLIS_WEIGHTSYNC_CUDA_IPC_TRANSPORT_H_

// Weights between processes on one GPU through CUDA IPC memory handles,
// built as trellis::weightsync_cuda_ipc where LibTorch has CUDA
// (TRELLIS_CUDA).
//
// The same shape as the NCCL transport (nccl_transport.h): one publisher
// hosting the rendezvous store (comm/tcp_store.h) and `num_receivers` slots, each served by a
// thread of the publisher; requests (min_version, wait) and answers travel
// through the store (internal/cuda_ipc_protocol.h). Publish packs and
// checksums a version into host buckets (internal/staging.h). When a
// receiver asks, the publisher checks those buckets against their
// checksums, copies the version once into device buckets it owns
// (cudaMalloc on `cuda_device`, synchronized before anything is
// announced) and answers with the layout and one cudaIpcMemHandle per
// bucket. The receiver opens each handle once (cached while the publisher
// keeps the bucket), copies from the publisher's device memory straight
// into dst (device to device for dst on the GPU; nothing is staged on the
// receiver), synchronizes, and says "done": a device set that a receiver
// is still reading is never rewritten (a fresh one is allocated instead),
// and one whose reader never said done is kept until that receiver
// reconnects.
//
// Integrity (docs/gpu.md): the bytes do not cross a wire, so the checksums
// are checked where the bytes could still change, on the publisher's host
// buckets just before they are copied to the device: a mismatch is the
// receiver's DataLoss, naming the bucket. Both ends must be on the same GPU
// (the announcement carries its UUID; FailedPrecondition otherwise). A
// receiver in the publisher's own process (CUDA refuses to open a
// process's own handles) reads the buckets at their addresses.
//
// Stats: Publish gather = packing, transfer = checksumming; Receive
// transfer = from the answer to the buckets mapped, load = the copy into
// dst.

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weightsync/transport.h"

namespace trellis::weightsync {

class TransportRegistry;

// OK when CUDA reports a usable device; otherwise FailedPrecondition
// saying why (no device, no driver). Tests skip on it.
[[nodiscard]] absl::Status CudaIpcAvailable();

// Read bucket_bytes, host, port, num_receivers, connect_timeout and
// cuda_device; a receiver, receiver_index too. InvalidArgument naming a
// bad field; FailedPrecondition when `cuda_device` is not a usable GPU.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Publisher>> NewCudaIpcPublisher(
    const TransportOptions& options);
[[nodiscard]] absl::StatusOr<std::unique_ptr<Receiver>> NewCudaIpcReceiver(
    const TransportOptions& options);

// Registers "cuda_ipc" (the two constructors above).
[[nodiscard]] absl::Status RegisterCudaIpcTransport(TransportRegistry& registry);

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_CUDA_IPC_TRANSPORT_H_
