// The gloo transport: see gloo_transport.h for the protocol.
//
// Per receiver request, on the receiver's pair (sender rank 0, receiver
// rank 1): the receiver sends int64 [min_version, wait_ms]; the sender
// answers int64 [code, length] and then either `length` bytes of an error
// message (code is an absl::StatusCode) or a serialized v1::WeightsHeader
// followed by every non-empty bucket, one message each.

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif

#include "weightsync/gloo_transport.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "trellis/v1/weights.pb.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/checksum.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/threaded_sender.h"
#include "weightsync/internal/tcp_store.h"
#include "weightsync/internal/gloo_pair.h"
#include "weightsync/internal/wire.h"


namespace trellis::weightsync {
namespace {


using internal::BucketSet;
using internal::Stopwatch;
using internal::gloo::PG;
using internal::ConnectStore;
using internal::ToMs;
using internal::WaitForListener;
using internal::gloo::kTagRequest;
using internal::gloo::kTagPreamble;
using internal::gloo::kTagBody;
using internal::gloo::kTagBucket0;
using internal::gloo::kSliceBytes;
using internal::gloo::kStopGrace;
using internal::gloo::GenerationKey;
using internal::gloo::WaitWork;
using internal::gloo::ConnectPair;
using internal::gloo::CheckEndpoint;

// ---------------------------------------------------------------- sender

struct SenderState : internal::SenderCore {
  SenderState(GlooEndpoint ep, TransportOptions options)
      : SenderCore("weightsync gloo", options.bucket_bytes), endpoint(std::move(ep)) {}

  struct Slot {
    int64_t generation = 0;  // The receiver connection being served.
    c10::intrusive_ptr<c10d::Work> request;  // Pending request recv.
    std::vector<c10::intrusive_ptr<c10d::Work>> sends;  // Pending sends.
  };

  void Abort(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (slot.request) slot.request->abort();
    for (auto& w : slot.sends) w->abort();
  }

  void AbortPending() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (Slot& slot : slots) Abort(slot);
  }

  const GlooEndpoint endpoint;
  c10::intrusive_ptr<c10d::TCPStore> server;
  std::shared_ptr<::gloo::transport::Device> device;
  std::vector<Slot> slots ABSL_GUARDED_BY(mu);
};

// Answers one request on `pg`. Any error means the pair is unusable.
absl::Status ServeOne(SenderState& st, int k, PG& pg) {
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

  absl::StatusOr<std::shared_ptr<const BucketSet>> set = st.stage.WaitFor(
      min_version, absl::Now() + absl::Milliseconds(wait_ms));
  std::string body;
  int64_t code = 0;
  if (set.ok()) {
    internal::EncodeHeader(**set).SerializeToString(&body);
  } else {
    // Closing (Cancelled here) is Unavailable to the receiver: retry later.
    code = static_cast<int64_t>(absl::IsCancelled(set.status())
                                    ? absl::StatusCode::kUnavailable
                                    : set.status().code());
    body = std::string(set.status().message());
  }

  std::vector<std::vector<at::Tensor>> messages;
  std::vector<int> tags;
  at::Tensor preamble = at::empty({2}, at::kLong);
  preamble.data_ptr<int64_t>()[0] = code;
  preamble.data_ptr<int64_t>()[1] = static_cast<int64_t>(body.size());
  messages.push_back({preamble});
  tags.push_back(kTagPreamble);
  at::Tensor body_tensor = at::empty({static_cast<int64_t>(body.size())},
                                     at::kByte);
  if (!body.empty()) {
    std::memcpy(body_tensor.data_ptr(), body.data(), body.size());
    messages.push_back({body_tensor});
    tags.push_back(kTagBody);
  }
  int64_t bytes = 0;
  if (set.ok()) {
    int slice = 0;
    for (const at::Tensor& bucket : (*set)->buckets) {
      for (int64_t off = 0; off < bucket.numel(); off += kSliceBytes) {
        const int64_t n = std::min(kSliceBytes, bucket.numel() - off);
        messages.push_back({bucket.narrow(0, off, n)});
        tags.push_back(kTagBucket0 + slice++);
      }
      bytes += bucket.numel();
    }
  }
  // Post everything at once; the receiver has posted its bucket receives.
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  try {
    for (size_t i = 0; i < messages.size(); ++i) {
      works.push_back(pg.send(messages[i], 1, tags[i]));
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("send: ", e.what()));
  }
  {
    absl::MutexLock lock(&st.mu);
    st.slots[k].sends = works;
    if (st.stopping) st.Abort(st.slots[k]);
  }
  // A live receiver drains at loopback or network speed; allow 50 MB/s.
  const absl::Duration send_timeout =
      std::max(st.endpoint.connect_timeout, absl::Seconds(10)) +
      absl::Seconds(static_cast<double>(bytes) / 50e6);
  const absl::Time send_deadline = absl::Now() + send_timeout;
  absl::Status status;
  for (auto& w : works) {
    status = WaitWork(w, std::max(send_deadline - absl::Now(),
                                  absl::Milliseconds(1)),
                      "send");
    if (!status.ok()) break;
  }
  absl::MutexLock lock(&st.mu);
  st.slots[k].sends.clear();
  if (!status.ok()) return status;
  // Closing: the receiver got its Cancelled answer; stop serving.
  return set.status().code() == absl::StatusCode::kCancelled ? set.status()
                                                             : absl::OkStatus();
}

void ServeSlot(std::shared_ptr<SenderState> st, int k) {
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store =
      ConnectStore(st->endpoint.host, st->endpoint.port, /*server=*/false,
                   st->endpoint.connect_timeout);
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
    absl::StatusOr<c10::intrusive_ptr<PG>> pg =
        ConnectPair(*store, st->device, k, generation, /*rank=*/0,
                    st->endpoint.connect_timeout);
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
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store =
      ConnectStore(st->endpoint.host, st->endpoint.port, /*server=*/false,
                   st->endpoint.connect_timeout);
  const int n = st->endpoint.num_receivers;
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

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> NewGlooSender(
    const GlooEndpoint& endpoint, TransportOptions options) {
  if (absl::Status s = CheckEndpoint(endpoint); !s.ok()) return s;
  if (absl::Status s = internal::CheckReceiverIndex("weightsync gloo", /*sender=*/true,
                                                 endpoint.receiver_index,
                                                 endpoint.num_receivers);
      !s.ok()) {
    return s;
  }
  auto st = std::make_shared<SenderState>(endpoint, options);
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> server =
      ConnectStore(endpoint.host, endpoint.port, /*server=*/true,
                   endpoint.connect_timeout);
  if (!server.ok()) return server.status();
  st->server = *std::move(server);
  try {
    st->device = PG::createDeviceForHostname(endpoint.host);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("weightsync gloo: no gloo device for ", endpoint.host,
                     ": ", e.what()));
  }
  const int n = endpoint.num_receivers;
  {
    absl::MutexLock lock(&st->mu);
    st->slots.resize(n);
    st->live_threads = n + 1;
  }
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k) threads.emplace_back(ServeSlot, st, k);
  threads.emplace_back(Monitor, st);
  return std::make_unique<internal::ThreadedSender>(std::move(st), std::move(threads),
                                                    "weightsync gloo", kStopGrace);
}

absl::StatusOr<int> PickFreeTcpPort(const std::string& host) {
  return internal::FreeTcpPort(host);
}

}  // namespace trellis::weightsync
