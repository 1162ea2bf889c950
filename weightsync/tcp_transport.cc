// The tcp transport's publisher: see tcp_transport.h for the design.
//
// Per receiver request, on the slot's connection: the receiver sends int64
// [min_version, wait_ms]; the publisher answers int64 [code, length] and
// then either `length` bytes of an error message (code is an
// absl::StatusCode) or a serialized v1::WeightsHeader (its checksums all
// 0) followed by the bytes of every wire segment (internal/wire.h
// Segments), each as soon as it is packed or from the published tensors in
// place, and then int64 [one checksum per bucket] when there is a bucket.

#include "weightsync/tcp_transport.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "trellis/v1/weights.pb.h"
#include "weightsync/internal/segment_io.h"
#include "weightsync/internal/socket_io.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/tcp_protocol.h"
#include "weightsync/internal/threaded_sender.h"
#include "weightsync/internal/wire.h"

// In the protocol's namespace (internal/tcp_protocol.h), for its names.
namespace trellis::weightsync::internal::tcp {
namespace {

struct SenderState : SenderCore {
  explicit SenderState(const TransportOptions& options)
      : SenderCore(kName, options.bucket_bytes, options.num_receivers), options(options) {}

  struct Slot {
    Socket pending;    // A new connection, handed over by the acceptor.
    int serving = -1;  // The descriptor the slot's thread serves.
  };

  void AbortPending() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    shutdown(listener.fd(), SHUT_RDWR);
    for (Slot& slot : slots) {
      if (slot.serving >= 0) shutdown(slot.serving, SHUT_RDWR);
    }
  }

  const TransportOptions options;
  Socket listener;
  std::vector<Slot> slots ABSL_GUARDED_BY(mu);
};

// Answers one request on `conn`. Any error means the connection is unusable.
absl::Status ServeOne(SenderState& st, const Socket& conn) {
  int64_t request[2] = {0, 0};
  if (absl::Status s =
          RecvAll(conn, request, sizeof(request), absl::InfiniteFuture(), "request", &st.stopping);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<StreamedVersion> version =
      st.stage.WaitForStream(request[0], absl::Now() + absl::Milliseconds(request[1]));
  std::string body;
  int64_t preamble[2] = {0, 0};
  int64_t bytes = 0;
  if (version.ok()) {
    EncodeHeader(*version->set, /*with_checksums=*/false).SerializeToString(&body);
    for (const at::Tensor& bucket : version->set->buckets) bytes += bucket.numel();
  } else {
    // Closing (Cancelled here) is Unavailable to the receiver: retry later.
    preamble[0] =
        static_cast<int64_t>(absl::IsCancelled(version.status()) ? absl::StatusCode::kUnavailable
                                                                 : version.status().code());
    body = std::string(version.status().message());
  }
  preamble[1] = static_cast<int64_t>(body.size());
  // A live receiver drains at loopback or network speed; allow 50 MB/s.
  const absl::Time deadline = absl::Now() +
                              std::max(st.options.connect_timeout, absl::Seconds(10)) +
                              absl::Seconds(static_cast<double>(bytes) / 50e6);
  iovec answer[2] = {{preamble, sizeof(preamble)}, {body.data(), body.size()}};
  if (absl::Status s = SendAll(conn, answer, 2, deadline, "answer", &st.stopping); !s.ok()) {
    return s;
  }
  if (!version.ok()) {
    // Closing: the receiver got its answer; stop serving.
    return absl::IsCancelled(version.status()) ? version.status() : absl::OkStatus();
  }
  // Each segment with one sendmsg, rows apart as they lie.
  absl::StatusOr<std::vector<uint64_t>> checksums = StreamVersion(
      *version, kSegmentBytes, deadline, [&](size_t, const WireSegment&, std::vector<iovec>& runs) {
        return SendAll(conn, runs.data(), static_cast<int>(runs.size()), deadline, "bucket",
                       &st.stopping);
      });
  if (!checksums.ok()) return checksums.status();
  // Every byte is in the kernel's buffers: the published tensors are free
  // once `version` goes.
  return SendAll(conn, checksums->data(), checksums->size() * sizeof(uint64_t), deadline,
                 "checksums", &st.stopping);
}

void ServeSlot(std::shared_ptr<SenderState> st, int k) {
  while (!st->stopping) {
    Socket conn;
    {
      absl::MutexLock lock(&st->mu);
      auto ready = [&st, k]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(st->mu) {
        return st->stopping || st->slots[k].pending.valid();
      };
      st->mu.Await(absl::Condition(&ready));
      if (st->stopping) break;
      conn = std::move(st->slots[k].pending);
      st->slots[k].serving = conn.fd();
    }
    while (!st->stopping && ServeOne(*st, conn).ok()) {
    }
    absl::MutexLock lock(&st->mu);
    st->slots[k].serving = -1;
  }
  absl::MutexLock lock(&st->mu);
  --st->live_threads;
}

// Whether `hello` is a live receiver's: its slot exists and its token is
// the one that slot's generation set in the store.
bool Admitted(SenderState& st, const int64_t (&hello)[kHelloWords]) {
  if (hello[0] < 0 || hello[0] >= st.options.num_receivers) return false;
  const std::string key = TokenKey(static_cast<int>(hello[0]), hello[1]);
  try {
    if (!st.store->check({key})) return false;
    const std::vector<uint8_t> token = st.store->get(key);
    st.store->deleteKey(key);
    return token.size() == 2 * sizeof(int64_t) &&
           std::memcmp(token.data(), &hello[2], token.size()) == 0;
  } catch (const std::exception&) {
    return false;
  }
}

// Takes each new data connection and hands it to its slot, replacing (and
// shutting down) the one served before.
void AcceptConnections(std::shared_ptr<SenderState> st) {
  while (!st->stopping) {
    absl::StatusOr<Socket> conn = Accept(st->listener);
    if (!conn.ok()) break;  // The listener was shut down: stopping.
    if (!conn->valid() || !Tune(*conn).ok()) continue;
    int64_t hello[kHelloWords] = {};
    if (!RecvAll(*conn, hello, sizeof(hello), absl::Now() + kHelloTimeout, "hello", &st->stopping)
             .ok() ||
        !Admitted(*st, hello)) {
      continue;
    }
    absl::MutexLock lock(&st->mu);
    SenderState::Slot& slot = st->slots[hello[0]];
    slot.pending = *std::move(conn);
    if (slot.serving >= 0) shutdown(slot.serving, SHUT_RDWR);
  }
  absl::MutexLock lock(&st->mu);
  --st->live_threads;
}

absl::StatusOr<std::unique_ptr<Publisher>> StartPublisher(const TransportOptions& options) {
  auto st = std::make_shared<SenderState>(options);
  if (absl::Status s = HostStore(kName, options, *st); !s.ok()) return s;
  absl::StatusOr<Listening> listening = Listen(options.host);
  if (!listening.ok()) {
    return absl::Status(listening.status().code(),
                        absl::StrCat(kName, ": ", listening.status().message()));
  }
  st->listener = std::move(listening->socket);
  try {
    st->store->set(kDataPortKey, std::to_string(listening->port));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(kName, ": publishing the data port: ", e.what()));
  }
  {
    absl::MutexLock lock(&st->mu);
    st->slots.resize(options.num_receivers);
  }
  return StartSlotThreads(std::move(st), options.num_receivers, ServeSlot, kStopGrace,
                          AcceptConnections);
}

}  // namespace
}  // namespace trellis::weightsync::internal::tcp

namespace trellis::weightsync {

absl::StatusOr<std::unique_ptr<Publisher>> NewTcpPublisher(const TransportOptions& options) {
  return internal::tcp::StartPublisher(options);
}

}  // namespace trellis::weightsync
