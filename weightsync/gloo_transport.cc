// The gloo transport: see gloo_transport.h for the protocol.
//
// Per receiver request, on the receiver's pair (sender rank 0, receiver
// rank 1): the receiver sends int64 [min_version, wait_ms]; the sender
// answers int64 [code, length] and then either `length` bytes of an error
// message (code is an absl::StatusCode) or a serialized v1::WeightsHeader
// (its checksums all 0) followed by every bucket, each byte as soon as it
// is packed, and then int64 [one checksum per bucket] when there is a
// bucket. The buckets travel as their tensors' bytes (internal/wire.h
// Segments: the padding between them stays behind), a message per segment
// of at most kSliceBytes, at most kSendWindow in flight; bytes not packed
// when sent are read from the published tensors in place
// (internal/staging.h PackProgress).

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif

#include "weightsync/gloo_transport.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "comm/gloo_pair.h"
#include "comm/tcp_store.h"
#include "trellis/v1/weights.pb.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/gloo_protocol.h"
#include "weightsync/internal/segment_io.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/threaded_sender.h"
#include "weightsync/internal/wire.h"

// In the protocol's namespace (internal/gloo_protocol.h), for its names.
namespace trellis::weightsync::internal::gloo {
namespace {

using comm::GlooGroup;
using comm::WaitWork;

struct SenderState : SenderCore {
  explicit SenderState(const TransportOptions& options)
      : SenderCore(kName, options.bucket_bytes, options.num_receivers), options(options) {}

  struct Slot {
    int64_t generation = 0;                             // The receiver connection being served.
    c10::intrusive_ptr<c10d::Work> request;             // Pending request recv.
    std::vector<c10::intrusive_ptr<c10d::Work>> sends;  // Pending sends.
  };

  void Abort(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (slot.request) slot.request->abort();
    for (auto& w : slot.sends) w->abort();
  }

  void AbortPending() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (Slot& slot : slots) Abort(slot);
  }

  const TransportOptions options;
  std::shared_ptr<comm::GlooDevice> device;
  std::vector<Slot> slots ABSL_GUARDED_BY(mu);
};

// Answers one request on `pg`. Any error means the pair is unusable.
absl::Status ServeOne(SenderState& st, int k, GlooGroup& pg) {
  at::Tensor request = at::zeros({2}, at::kLong);
  {
    std::vector<at::Tensor> v{request};
    c10::intrusive_ptr<c10d::Work> work = pg.recv(v, 1, kTagRequest);
    {
      absl::MutexLock lock(&st.mu);
      st.slots[k].request = work;
      if (st.stopping) work->abort();
    }
    // No timeout: the receiver asks when it wants; the monitor aborts this
    // wait when the receiver reconnects, Stop() when the sender closes.
    absl::Status s = WaitWork(work, absl::Hours(24 * 365), "request");
    absl::MutexLock lock(&st.mu);
    st.slots[k].request.reset();
    if (!s.ok()) return s;
  }
  const int64_t min_version = request.data_ptr<int64_t>()[0];
  const int64_t wait_ms = request.data_ptr<int64_t>()[1];

  absl::StatusOr<StreamedVersion> version =
      st.stage.WaitForStream(min_version, absl::Now() + absl::Milliseconds(wait_ms));
  std::string body;
  int64_t code = 0;
  int64_t bytes = 0;
  if (version.ok()) {
    internal::EncodeHeader(*version->set, /*with_checksums=*/false).SerializeToString(&body);
    for (const at::Tensor& bucket : version->set->buckets) bytes += bucket.numel();
  } else {
    // Closing (Cancelled here) is Unavailable to the receiver: retry later.
    code = static_cast<int64_t>(absl::IsCancelled(version.status()) ? absl::StatusCode::kUnavailable
                                                                    : version.status().code());
    body = std::string(version.status().message());
  }
  // A live receiver drains at loopback or network speed; allow 50 MB/s.
  const absl::Duration send_timeout = std::max(st.options.connect_timeout, absl::Seconds(10)) +
                                      absl::Seconds(static_cast<double>(bytes) / 50e6);
  const absl::Time send_deadline = absl::Now() + send_timeout;

  // Posts one message; the receiver has posted its receives.
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  // works[window_from, window_to) were waited for already (a gloo work
  // completes one wait only).
  size_t window_from = 0;
  size_t window_to = 0;
  auto post = [&](const at::Tensor& message, int tag) -> absl::Status {
    try {
      std::vector<at::Tensor> v{message};
      works.push_back(pg.send(v, 1, tag));
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("send: ", e.what()));
    }
    absl::MutexLock lock(&st.mu);
    st.slots[k].sends.push_back(works.back());
    if (st.stopping) st.Abort(st.slots[k]);
    return absl::OkStatus();
  };
  // Sends everything, each bucket once it is packed.
  auto send_all = [&]() -> absl::Status {
    at::Tensor preamble = at::empty({2}, at::kLong);
    preamble.data_ptr<int64_t>()[0] = code;
    preamble.data_ptr<int64_t>()[1] = static_cast<int64_t>(body.size());
    if (absl::Status s = post(preamble, kTagPreamble); !s.ok()) return s;
    if (!body.empty()) {
      at::Tensor body_tensor = at::empty({static_cast<int64_t>(body.size())}, at::kByte);
      std::memcpy(body_tensor.data_ptr(), body.data(), body.size());
      if (absl::Status s = post(body_tensor, kTagBody); !s.ok()) return s;
    }
    if (!version.ok()) return absl::OkStatus();
    window_from = window_to = works.size();
    std::vector<at::Tensor> scratch(kSendWindow);
    absl::StatusOr<std::vector<uint64_t>> checksums = StreamVersion(
        *version, kSliceBytes, send_deadline,
        [&](size_t m, const WireSegment& g, std::vector<iovec>& runs) -> absl::Status {
          // At most kSendWindow messages in flight: a scratch buffer is
          // free again, and the bytes just read are still in cache when sent.
          if (m >= kSendWindow) {
            const absl::Duration left =
                std::max(send_deadline - absl::Now(), absl::Milliseconds(1));
            if (absl::Status s = WaitWork(works[window_to++], left, "send"); !s.ok()) return s;
          }
          // A message is one buffer: rows apart are gathered into scratch.
          at::Tensor bytes;
          if (runs.size() == 1) {
            bytes = at::from_blob(runs[0].iov_base, {g.nbytes}, at::kByte);
          } else {
            at::Tensor& buffer = scratch[m % kSendWindow];
            if (!buffer.defined()) buffer = at::empty({kSliceBytes}, at::kByte);
            uint8_t* dst = buffer.data_ptr<uint8_t>();
            for (const iovec& run : runs) {
              std::memcpy(dst, run.iov_base, run.iov_len);
              dst += run.iov_len;
            }
            bytes = buffer.narrow(0, 0, g.nbytes);
          }
          return post(bytes, kTagBucket0 + static_cast<int>(m));
        });
    if (!checksums.ok()) return checksums.status();
    const std::vector<uint64_t>& sums_sent = *checksums;
    if (sums_sent.empty()) return absl::OkStatus();
    at::Tensor sums = at::empty({static_cast<int64_t>(sums_sent.size())}, at::kLong);
    std::memcpy(sums.data_ptr(), sums_sent.data(), sums_sent.size() * sizeof(uint64_t));
    return post(sums, kTagChecksums);
  };
  absl::Status status = send_all();
  for (size_t j = 0; j < works.size() && status.ok(); ++j) {
    if (j >= window_from && j < window_to) continue;
    status =
        WaitWork(works[j], std::max(send_deadline - absl::Now(), absl::Milliseconds(1)), "send");
  }
  // Nothing may read the published tensors once this returns.
  for (auto& w : works) {
    if (!status.ok() && !w->isCompleted()) w->abort();
  }
  absl::MutexLock lock(&st.mu);
  st.slots[k].sends.clear();
  if (!status.ok()) return status;
  // Closing: the receiver got its Cancelled answer; stop serving.
  return version.status().code() == absl::StatusCode::kCancelled ? version.status()
                                                                 : absl::OkStatus();
}

void ServeSlot(std::shared_ptr<SenderState> st, int k) {
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store =
      comm::ConnectStore(st->options.host, st->options.port, /*server=*/false,
                         st->options.connect_timeout, st->options.secret);
  int64_t served = 0;
  while (store.ok() && !st->stopping) {
    int64_t generation = 0;
    try {
      generation = (*store)->add(GenerationKey(k), 0);
    } catch (const std::exception&) {
      break;  // Our own store is gone: the sender is closing.
    }
    if (generation <= served) {
      st->SleepUnlessStopping(absl::Milliseconds(5));
      continue;
    }
    served = generation;
    {
      absl::MutexLock lock(&st->mu);
      st->slots[k].generation = generation;
    }
    absl::StatusOr<c10::intrusive_ptr<GlooGroup>> pg =
        comm::JoinGlooGroup(*store, PairPrefix(k, generation), /*rank=*/0, /*size=*/2, st->device,
                            st->options.connect_timeout);
    if (!pg.ok()) continue;  // The receiver retries with a new generation.
    while (!st->stopping && ServeOne(*st, k, **pg).ok()) {
    }
  }
  absl::MutexLock lock(&st->mu);
  --st->live_threads;
}

// Aborts a slot's pending request when its receiver has reconnected (the
// old connection may be dead without the socket telling us).
void Monitor(std::shared_ptr<SenderState> st) {
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store =
      comm::ConnectStore(st->options.host, st->options.port, /*server=*/false,
                         st->options.connect_timeout, st->options.secret);
  const int n = st->options.num_receivers;
  while (store.ok() && !st->stopping) {
    for (int k = 0; k < n && !st->stopping; ++k) {
      int64_t generation = 0;
      try {
        generation = (*store)->add(GenerationKey(k), 0);
      } catch (const std::exception&) {
        break;
      }
      absl::MutexLock lock(&st->mu);
      SenderState::Slot& slot = st->slots[k];
      if (generation > slot.generation && slot.request) slot.request->abort();
    }
    st->SleepUnlessStopping(absl::Milliseconds(20));
  }
  absl::MutexLock lock(&st->mu);
  --st->live_threads;
}

absl::StatusOr<std::unique_ptr<Publisher>> StartPublisher(const TransportOptions& options) {
  auto st = std::make_shared<SenderState>(options);
  if (absl::Status s = HostStore(kName, options, *st); !s.ok()) return s;
  // The device binds the store's address: receivers reach both alike.
  absl::StatusOr<std::shared_ptr<comm::GlooDevice>> device =
      comm::NewGlooDevice(options.host, options.host);
  if (!device.ok()) return device.status();
  st->device = *std::move(device);
  {
    absl::MutexLock lock(&st->mu);
    st->slots.resize(options.num_receivers);
  }
  return StartSlotThreads(std::move(st), options.num_receivers, ServeSlot, kStopGrace, Monitor);
}

}  // namespace
}  // namespace trellis::weightsync::internal::gloo

namespace trellis::weightsync {

absl::StatusOr<std::unique_ptr<Publisher>> NewGlooPublisher(const TransportOptions& options) {
  return internal::gloo::StartPublisher(options);
}

}  // namespace trellis::weightsync
