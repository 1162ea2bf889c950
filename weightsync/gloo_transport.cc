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
#include "weightsync/internal/tcp_store.h"
#include "weightsync/internal/wire.h"

namespace trellis::weightsync {
namespace {

using internal::BucketSet;
using internal::Stopwatch;
using PG = c10d::ProcessGroupGloo;
using internal::ConnectStore;
using internal::ToMs;
using internal::WaitForListener;

constexpr int kTagRequest = 1;
constexpr int kTagPreamble = 2;
constexpr int kTagBody = 3;
constexpr int kTagBucket0 = 16;
constexpr int64_t kMaxHeaderBytes = int64_t{1} << 30;
// Buckets travel in messages of at most this many bytes, so that the
// receiver checksums one slice while the next ones arrive whatever the
// bucket size.
constexpr int64_t kSliceBytes = int64_t{8} << 20;
// How long past its timeout a receiver waits for the sender's answer.
constexpr absl::Duration kAnswerGrace = absl::Milliseconds(500);
// How long the sender's destructor waits for its threads before leaving
// them to finish on their own.
constexpr absl::Duration kStopGrace = absl::Seconds(3);

std::string GenerationKey(int slot) {
  return absl::StrCat("slot/", slot, "/generation");
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Waits for one send or recv. A gloo timeout poisons the whole pair, so
// every error here means: drop the process group.
absl::Status WaitWork(const c10::intrusive_ptr<c10d::Work>& work,
                      absl::Duration timeout, const char* what) {
  try {
    if (!work->wait(ToMs(timeout))) {
      return absl::CancelledError(absl::StrCat(what, " was aborted"));
    }
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    if (msg.find("Timed out") != std::string::npos) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": no answer within ", absl::FormatDuration(timeout)));
    }
    return absl::UnavailableError(absl::StrCat(what, ": ", msg));
  }
  return absl::OkStatus();
}

absl::StatusOr<c10::intrusive_ptr<PG>> ConnectPair(
    const c10::intrusive_ptr<c10d::Store>& store,
    const std::shared_ptr<::gloo::transport::Device>& device, int slot,
    int64_t generation, int rank, absl::Duration timeout) {
  try {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
        absl::StrCat("pair/", slot, "/", generation), store);
    auto options = PG::Options::create(ToMs(timeout));
    options->devices = {device};
    options->threads = 1;  // Only send/recv, which the device thread runs.
    return c10::make_intrusive<PG>(prefixed, rank, 2, options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "weightsync gloo: pair rendezvous of receiver slot ", slot,
        " failed: ", e.what()));
  }
}

// ---------------------------------------------------------------- sender

struct SenderState {
  SenderState(GlooEndpoint ep, TransportOptions options)
      : endpoint(std::move(ep)),
        stage("weightsync gloo", options.bucket_bytes) {}

  struct Slot {
    int64_t generation = 0;  // The receiver connection being served.
    c10::intrusive_ptr<c10d::Work> request;  // Pending request recv.
    std::vector<c10::intrusive_ptr<c10d::Work>> sends;  // Pending sends.
  };

  void Abort(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (slot.request) slot.request->abort();
    for (auto& w : slot.sends) w->abort();
  }

  const GlooEndpoint endpoint;
  internal::VersionStage stage;
  c10::intrusive_ptr<c10d::TCPStore> server;
  std::shared_ptr<::gloo::transport::Device> device;
  std::atomic<bool> stopping{false};

  absl::Mutex mu;
  std::vector<Slot> slots ABSL_GUARDED_BY(mu);
  int live_threads ABSL_GUARDED_BY(mu) = 0;
};

void SleepUnlessStopping(SenderState& st, absl::Duration d) {
  absl::MutexLock lock(&st.mu);
  st.mu.AwaitWithTimeout(
      absl::Condition(
          +[](std::atomic<bool>* s) { return s->load(); }, &st.stopping),
      d);
}

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
      SleepUnlessStopping(*st, absl::Milliseconds(5));
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
    SleepUnlessStopping(*st, absl::Milliseconds(20));
  }
  absl::MutexLock lock(&st->mu);
  --st->live_threads;
}

class GlooSender final : public Transport, public internal::StagedSender {
 public:
  explicit GlooSender(std::shared_ptr<SenderState> st) : st_(std::move(st)) {
    const int n = st_->endpoint.num_receivers;
    {
      absl::MutexLock lock(&st_->mu);
      st_->slots.resize(n);
      st_->live_threads = n + 1;
    }
    for (int k = 0; k < n; ++k) threads_.emplace_back(ServeSlot, st_, k);
    threads_.emplace_back(Monitor, st_);
  }

  ~GlooSender() override {
    st_->stopping = true;
    st_->stage.Close();
    {
      absl::MutexLock lock(&st_->mu);
      for (SenderState::Slot& slot : st_->slots) st_->Abort(slot);
      auto done = +[](int* live) { return *live == 0; };
      st_->mu.AwaitWithTimeout(absl::Condition(done, &st_->live_threads),
                               kStopGrace);
      if (st_->live_threads != 0) {
        // A thread stuck in a rendezvous ends by its connect timeout; it
        // holds its own reference to the state.
        for (std::thread& t : threads_) t.detach();
        threads_.clear();
      }
    }
    for (std::thread& t : threads_) t.join();
  }

  absl::StatusOr<v1::WeightSyncStats> Publish(
      int64_t version, const NamedTensors& tensors) override {
    return st_->stage.Stage(version, tensors);
  }

  absl::StatusOr<v1::WeightSyncStats> Receive(int64_t, const NamedTensors&,
                                              absl::Duration) override {
    return absl::UnimplementedError(
        "weightsync gloo: Receive on the sending end");
  }

  internal::VersionStage* stage() override { return &st_->stage; }

 private:
  std::shared_ptr<SenderState> st_;
  std::vector<std::thread> threads_;
};

// -------------------------------------------------------------- receiver

class GlooReceiver final : public Transport {
 public:
  explicit GlooReceiver(GlooEndpoint ep) : ep_(std::move(ep)) {}

  ~GlooReceiver() override {
    absl::MutexLock lock(&mu_);
    pg_.reset();
    store_.reset();
  }

  absl::StatusOr<v1::WeightSyncStats> Publish(int64_t,
                                              const NamedTensors&) override {
    return absl::UnimplementedError(
        "weightsync gloo: Publish on a receiving end");
  }

  absl::StatusOr<v1::WeightSyncStats> Receive(int64_t min_version,
                                              const NamedTensors& dst,
                                              absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    const absl::Time start = absl::Now();
    const absl::Time deadline = start + timeout;
    auto fail = [&](const absl::Status& s) {
      const std::string what = absl::StrCat(
          "weightsync gloo receiver ", ep_.receiver_index, ": waited ",
          absl::FormatDuration(absl::Now() - start),
          " for weights version >= ", min_version, " from ", ep_.host, ":",
          ep_.port, ": ", s.message());
      if (absl::IsDeadlineExceeded(s) || absl::Now() >= deadline) {
        return absl::DeadlineExceededError(what);
      }
      return absl::Status(s.code(), what);
    };
    if (!pg_) {
      if (absl::Status s = Connect(deadline); !s.ok()) return fail(s);
    }
    absl::StatusOr<BucketSet> set = Fetch(min_version, deadline);
    if (!set.ok()) {
      const absl::StatusCode code = set.status().code();
      // Answers from the sender leave the pair usable; transport errors
      // do not.
      if (!answered_) {
        pg_.reset();
        store_.reset();
        return fail(set.status());
      }
      if (code == absl::StatusCode::kDeadlineExceeded) {
        return absl::DeadlineExceededError(set.status().message());
      }
      return set.status();
    }
    if (absl::Status s = internal::CheckMatches(*set, dst); !s.ok()) return s;
    Stopwatch load;
    // The buckets are this receiver's own (spare_ reuses only free ones).
    if (absl::Status s = internal::LoadInto(*set, dst, spare_.buckets()); !s.ok()) {
      return s;
    }
    v1::WeightSyncStats stats = internal::BaseStats(*set);
    stats.set_transfer_seconds(transfer_seconds_);
    stats.set_load_seconds(load.Seconds());
    return stats;
  }

 private:
  absl::Status Connect(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Duration budget =
        std::min(deadline - absl::Now(), ep_.connect_timeout);
    if (budget <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("no time left to connect");
    }
    if (!store_) {
      if (absl::Status s = WaitForListener(ep_.host, ep_.port, deadline);
          !s.ok()) {
        return s;
      }
      absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store =
          ConnectStore(ep_.host, ep_.port, /*server=*/false, budget);
      if (!store.ok()) return store.status();
      store_ = *std::move(store);
    }
    try {
      if (!device_) {
        std::string local = ep_.local_host;
        if (local.empty() && IsLoopback(ep_.host)) local = ep_.host;
        device_ = local.empty() ? PG::createDefaultDevice()
                                : PG::createDeviceForHostname(local);
      }
      const int64_t generation =
          store_->add(GenerationKey(ep_.receiver_index), 1);
      absl::StatusOr<c10::intrusive_ptr<PG>> pg = ConnectPair(
          store_, device_, ep_.receiver_index, generation, /*rank=*/1,
          std::max(deadline - absl::Now(), absl::Milliseconds(1)));
      if (!pg.ok()) {
        store_.reset();
        return pg.status();
      }
      pg_ = *std::move(pg);
    } catch (const std::exception& e) {
      store_.reset();
      return absl::UnavailableError(e.what());
    }
    return absl::OkStatus();
  }

  // One request and its answer on pg_. Sets answered_ once the sender's
  // preamble arrived (the pair is then in step whatever follows, unless
  // a bucket fails to arrive).
  absl::StatusOr<BucketSet> Fetch(int64_t min_version, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    answered_ = false;
    const absl::Duration left =
        std::max(deadline - absl::Now(), absl::ZeroDuration());
    at::Tensor request = at::empty({2}, at::kLong);
    request.data_ptr<int64_t>()[0] = min_version;
    request.data_ptr<int64_t>()[1] = absl::ToInt64Milliseconds(left);
    at::Tensor preamble = at::zeros({2}, at::kLong);
    try {
      std::vector<at::Tensor> req{request};
      std::vector<at::Tensor> pre{preamble};
      auto recv = pg_->recv(pre, 0, kTagPreamble);
      auto send = pg_->send(req, 0, kTagRequest);
      if (absl::Status s = WaitWork(send, left + kAnswerGrace, "request");
          !s.ok()) {
        return s;
      }
      if (absl::Status s = WaitWork(
              recv, std::max(deadline - absl::Now(), absl::ZeroDuration()) +
                        kAnswerGrace,
              "answer");
          !s.ok()) {
        return s;
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(e.what());
    }
    const int64_t code = preamble.data_ptr<int64_t>()[0];
    const int64_t length = preamble.data_ptr<int64_t>()[1];
    if (length < 0 || length > kMaxHeaderBytes) {
      return absl::DataLossError(
          absl::StrCat("the sender announced a ", length, "-byte header"));
    }
    // From here the sender is committed; give a hung one a fair bound.
    const absl::Duration io = std::max(deadline - absl::Now(),
                                       ep_.connect_timeout);
    at::Tensor body = at::empty({length}, at::kByte);
    if (length > 0) {
      std::vector<at::Tensor> v{body};
      if (absl::Status s = WaitWork(pg_->recv(v, 0, kTagBody), io, "header");
          !s.ok()) {
        return s;
      }
    }
    const std::string bytes(static_cast<const char*>(body.data_ptr()),
                            static_cast<size_t>(length));
    if (code != 0) {
      answered_ = true;
      return absl::Status(static_cast<absl::StatusCode>(code), bytes);
    }
    v1::WeightsHeader header;
    if (!header.ParseFromString(bytes)) {
      return absl::DataLossError("the sender's header does not parse");
    }
    Stopwatch transfer;
    absl::StatusOr<BucketSet> set = internal::DecodeHeader(header, spare_.buckets());
    if (!set.ok()) return set.status();
    struct Slice {
      size_t bucket;
      at::Tensor bytes;
      c10::intrusive_ptr<c10d::Work> work;
    };
    std::vector<Slice> slices;
    try {
      for (size_t i = 0; i < set->buckets.size(); ++i) {
        const at::Tensor& bucket = set->buckets[i];
        for (int64_t off = 0; off < bucket.numel(); off += kSliceBytes) {
          const int64_t n = std::min(kSliceBytes, bucket.numel() - off);
          std::vector<at::Tensor> v{bucket.narrow(0, off, n)};
          const int tag = kTagBucket0 + static_cast<int>(slices.size());
          slices.push_back({i, v[0], pg_->recv(v, 0, tag)});
        }
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(e.what());
    }
    const absl::Time io_deadline = absl::Now() + io;
    absl::Status corrupt;
    internal::Checksum64Stream sum;
    size_t bucket = 0;
    // Checks every bucket before `upto` (all of them complete).
    auto settle = [&](size_t upto) {
      for (; bucket < upto; ++bucket) {
        if (corrupt.ok()) {
          corrupt = internal::CheckBucketChecksum(*set, bucket, sum.Finish());
        }
        sum = internal::Checksum64Stream();
      }
    };
    for (Slice& slice : slices) {
      absl::Status s = WaitWork(
          slice.work,
          std::max(io_deadline - absl::Now(), absl::Milliseconds(1)),
          "bucket");
      if (!s.ok()) return s;
      settle(slice.bucket);
      // Checksum this slice while the next ones arrive.
      sum.Update(slice.bytes.data_ptr(), slice.bytes.numel());
    }
    settle(set->buckets.size());
    answered_ = true;
    spare_.Remember(set->buckets);
    transfer_seconds_ = transfer.Seconds();
    if (!corrupt.ok()) return corrupt;
    return set;
  }

  const GlooEndpoint ep_;
  absl::Mutex mu_;
  c10::intrusive_ptr<c10d::TCPStore> store_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<::gloo::transport::Device> device_ ABSL_GUARDED_BY(mu_);
  c10::intrusive_ptr<PG> pg_ ABSL_GUARDED_BY(mu_);
  internal::SparePool spare_ ABSL_GUARDED_BY(mu_);
  bool answered_ ABSL_GUARDED_BY(mu_) = false;
  double transfer_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status CheckEndpoint(const GlooEndpoint& ep) {
  if (ep.port <= 0 || ep.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("weightsync gloo: port must be in 1..65535, got ",
                     ep.port, " (PickFreeTcpPort finds one)"));
  }
  if (ep.num_receivers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weightsync gloo: num_receivers must be >= 1, got ", ep.num_receivers));
  }
  if (ep.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "weightsync gloo: connect_timeout must be positive");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> NewGlooSender(
    const GlooEndpoint& endpoint, TransportOptions options) {
  if (absl::Status s = CheckEndpoint(endpoint); !s.ok()) return s;
  if (endpoint.receiver_index != -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weightsync gloo: a sender has receiver_index -1, got ",
        endpoint.receiver_index));
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
  return std::make_unique<GlooSender>(std::move(st));
}

absl::StatusOr<std::unique_ptr<Transport>> NewGlooReceiver(
    const GlooEndpoint& endpoint, TransportOptions options) {
  if (absl::Status s = CheckEndpoint(endpoint); !s.ok()) return s;
  if (endpoint.receiver_index < 0 ||
      endpoint.receiver_index >= endpoint.num_receivers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weightsync gloo: receiver_index must be in 0..",
        endpoint.num_receivers - 1, ", got ", endpoint.receiver_index));
  }
  return std::make_unique<GlooReceiver>(endpoint);
}

absl::StatusOr<int> PickFreeTcpPort(const std::string& host) {
  return internal::FreeTcpPort(host);
}

}  // namespace trellis::weightsync
