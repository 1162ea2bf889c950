// The receiving end of the tcp transport (weightsync/tcp_transport.h): one
// receiver slot, connecting lazily and pulling the newest version.

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "trellis/v1/weights.pb.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/pull_receiver.h"
#include "weightsync/internal/segment_io.h"
#include "weightsync/internal/socket_io.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/tcp_protocol.h"
#include "weightsync/internal/threaded_sender.h"
#include "weightsync/internal/wire.h"
#include "weightsync/tcp_transport.h"

// In the protocol's namespace (internal/tcp_protocol.h), for its names.
namespace trellis::weightsync::internal::tcp {
namespace {

class TcpReceiver final : public PullReceiver {
 public:
  explicit TcpReceiver(const TransportOptions& options)
      : PullReceiver(absl::StrCat(kName, " receiver ", options.receiver_index),
                     absl::StrCat(options.host, ":", options.port)),
        options_(options) {}

  ~TcpReceiver() override {
    absl::MutexLock lock(&mu_);
    Disconnect();
  }

 private:
  void Disconnect() override {
    conn_ = Socket();
    store_.reset();
  }

  // The store, then a data connection that presents this generation's token.
  absl::Status Connect(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!store_) {
      absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store = ReachStore(options_, deadline);
      if (!store.ok()) return store.status();
      store_ = *std::move(store);
    }
    const int slot = options_.receiver_index;
    int64_t hello[kHelloWords] = {slot, 0, 0, 0};
    int port = 0;
    try {
      const std::vector<uint8_t> value = store_->get(kDataPortKey);
      if (!absl::SimpleAtoi(std::string(value.begin(), value.end()), &port)) {
        return absl::DataLossError("the publisher's data port does not parse");
      }
      hello[1] = store_->add(GenerationKey(slot), 1);
      std::random_device random;
      for (int i = 2; i < kHelloWords; ++i) {
        hello[i] = static_cast<int64_t>((uint64_t{random()} << 32) | random());
      }
      const auto* token = reinterpret_cast<const uint8_t*>(&hello[2]);
      store_->set(TokenKey(slot, hello[1]),
                  std::vector<uint8_t>(token, token + 2 * sizeof(int64_t)));
    } catch (const std::exception& e) {
      return absl::UnavailableError(e.what());
    }
    absl::StatusOr<Socket> conn = internal::Connect(options_.host, port, deadline);
    if (!conn.ok()) return conn.status();
    if (absl::Status s = Tune(*conn); !s.ok()) return s;
    if (absl::Status s = SendAll(*conn, hello, sizeof(hello), deadline, "hello"); !s.ok()) {
      return s;
    }
    conn_ = *std::move(conn);
    return absl::OkStatus();
  }

  // Where each manifest entry of `set` is received in place, marking it
  // (ManifestEntry::in_dst): its dst tensor's bytes under receive_in_place
  // when that tensor can hold them as they are, else null (its bucket).
  std::vector<uint8_t*> InPlaceTargets(BucketSet& set) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<uint8_t*> into(set.manifest.size(), nullptr);
    if (!options_.receive_in_place) return into;
    std::unordered_map<std::string, const at::Tensor*> by_name;
    for (const auto& [name, t] : dst()) by_name[name] = &t;
    for (size_t k = 0; k < set.manifest.size(); ++k) {
      ManifestEntry& e = set.manifest[k];
      auto it = by_name.find(e.name);
      if (it == by_name.end()) continue;
      const at::Tensor& t = *it->second;
      if (e.nbytes > 0 && t.defined() && t.device().is_cpu() && t.is_contiguous() &&
          t.scalar_type() == e.dtype && t.nbytes() == static_cast<size_t>(e.nbytes)) {
        into[k] = static_cast<uint8_t*>(t.data_ptr());
        e.in_dst = true;
      }
    }
    return into;
  }

  // One request and its answer on conn_.
  absl::StatusOr<Fetched> Fetch(int64_t min_version, absl::Time deadline, bool* in_step) override {
    if (!conn_.valid()) {
      if (absl::Status s = Connect(deadline); !s.ok()) return s;
    }
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    const int64_t request[2] = {min_version, absl::ToInt64Milliseconds(left)};
    if (absl::Status s =
            SendAll(conn_, request, sizeof(request), deadline + kAnswerGrace, "request");
        !s.ok()) {
      return s;
    }
    int64_t preamble[2] = {0, 0};
    if (absl::Status s =
            RecvAll(conn_, preamble, sizeof(preamble), deadline + kAnswerGrace, "answer");
        !s.ok()) {
      return s;
    }
    const int64_t code = preamble[0];
    const int64_t length = preamble[1];
    if (length < 0 || length > kMaxHeaderBytes) {
      return absl::DataLossError(
          absl::StrCat("the publisher announced a ", length, "-byte header"));
    }
    // From here the publisher is committed; give a hung one a fair bound.
    const absl::Time io = absl::Now() + std::max(deadline - absl::Now(), options_.connect_timeout);
    std::string body(static_cast<size_t>(length), '\0');
    if (absl::Status s = RecvAll(conn_, body.data(), body.size(), io, "header"); !s.ok()) return s;
    if (code != 0) {
      *in_step = true;
      return absl::Status(static_cast<absl::StatusCode>(code), body);
    }
    v1::WeightsHeader header;
    if (!header.ParseFromString(body)) {
      return absl::DataLossError("the publisher's header does not parse");
    }
    Stopwatch transfer;
    absl::StatusOr<BucketSet> set = DecodeHeader(header, spare());
    if (!set.ok()) return set.status();
    // Each piece straight into its bucket or its dst tensor, checksummed
    // while in cache; the thread woken once a whole piece is buffered.
    const std::vector<uint8_t*> into = InPlaceTargets(*set);
    const std::vector<WireSegment> pieces = Segments(*set, kReadBytes);
    const int64_t sums_bytes =
        set->buckets.empty() ? 0 : static_cast<int64_t>(set->checksums.size() * sizeof(uint64_t));
    int64_t stream_bytes = sums_bytes;
    for (const WireSegment& g : pieces) stream_bytes += g.nbytes;
    ReceiveLowWater water(conn_, stream_bytes);
    ReceivedSums sums(*set);
    for (const WireSegment& g : pieces) {
      const ManifestEntry& e = set->manifest[g.entry];
      uint8_t* at = into[g.entry] != nullptr
                        ? into[g.entry] + (g.offset - e.offset)
                        : set->buckets[g.bucket].data_ptr<uint8_t>() + g.offset;
      if (absl::Status s = water.Next(g.nbytes); !s.ok()) return s;
      if (absl::Status s = RecvAll(conn_, at, static_cast<size_t>(g.nbytes), io, "bucket");
          !s.ok()) {
        return s;
      }
      if (absl::Status s = sums.Add(g, at); !s.ok()) return s;
    }
    if (sums_bytes > 0) {
      if (absl::Status s = water.Next(sums_bytes); !s.ok()) return s;
      if (absl::Status s = RecvAll(conn_, set->checksums.data(), static_cast<size_t>(sums_bytes),
                                   io, "checksums");
          !s.ok()) {
        return s;
      }
    }
    const absl::Status verified = sums.Verify();
    *in_step = true;
    return Fetched{*std::move(set), transfer.Seconds(), verified};
  }

  const TransportOptions options_;
  c10::intrusive_ptr<c10d::Store> store_ ABSL_GUARDED_BY(mu_);
  Socket conn_ ABSL_GUARDED_BY(mu_);
};

}  // namespace
}  // namespace trellis::weightsync::internal::tcp

namespace trellis::weightsync {

absl::StatusOr<std::unique_ptr<Receiver>> NewTcpReceiver(const TransportOptions& options) {
  return internal::NewSlotReceiver<internal::tcp::TcpReceiver>(internal::tcp::kName, options);
}

}  // namespace trellis::weightsync
