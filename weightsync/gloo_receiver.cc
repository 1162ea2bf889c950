// The receiving end of the gloo transport (weightsync/gloo_transport.h):
// one receiver slot, connecting lazily and pulling the newest version.

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/gloo_pair.h"
#include "trellis/v1/weights.pb.h"
#include "weightsync/gloo_transport.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/gloo_protocol.h"
#include "weightsync/internal/pull_receiver.h"
#include "weightsync/internal/segment_io.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/threaded_sender.h"
#include "weightsync/internal/wire.h"

// In the protocol's namespace (internal/gloo_protocol.h), for its names.
namespace trellis::weightsync::internal::gloo {
namespace {

using comm::GlooGroup;
using comm::WaitWork;

class GlooReceiver final : public PullReceiver {
 public:
  explicit GlooReceiver(const TransportOptions& options)
      : PullReceiver(absl::StrCat(kName, " receiver ", options.receiver_index),
                     absl::StrCat(options.host, ":", options.port)),
        options_(options) {}

  ~GlooReceiver() override {
    absl::MutexLock lock(&mu_);
    Disconnect();
  }

 private:
  void Disconnect() override {
    pg_.reset();
    store_.reset();
  }

  absl::Status Connect(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!store_) {
      absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store = ReachStore(options_, deadline);
      if (!store.ok()) return store.status();
      store_ = *std::move(store);
    }
    if (!device_) {
      absl::StatusOr<std::shared_ptr<comm::GlooDevice>> device =
          comm::NewGlooDevice(options_.host, options_.local_host);
      if (!device.ok()) return device.status();
      device_ = *std::move(device);
    }
    int64_t generation = 0;
    try {
      generation = store_->add(GenerationKey(options_.receiver_index), 1);
    } catch (const std::exception& e) {
      return absl::UnavailableError(e.what());
    }
    absl::StatusOr<c10::intrusive_ptr<GlooGroup>> pg = comm::JoinGlooGroup(
        store_, PairPrefix(options_.receiver_index, generation), /*rank=*/1, /*size=*/2, device_,
        std::max(deadline - absl::Now(), absl::Milliseconds(1)));
    if (!pg.ok()) return pg.status();
    pg_ = *std::move(pg);
    return absl::OkStatus();
  }

  // One request and its answer on pg_.
  absl::StatusOr<Fetched> Fetch(int64_t min_version, absl::Time deadline, bool* in_step) override {
    if (!pg_) {
      if (absl::Status s = Connect(deadline); !s.ok()) return s;
    }
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    at::Tensor request = at::empty({2}, at::kLong);
    request.data_ptr<int64_t>()[0] = min_version;
    request.data_ptr<int64_t>()[1] = absl::ToInt64Milliseconds(left);
    at::Tensor preamble = at::zeros({2}, at::kLong);
    try {
      std::vector<at::Tensor> req{request};
      std::vector<at::Tensor> pre{preamble};
      auto recv = pg_->recv(pre, 0, kTagPreamble);
      auto send = pg_->send(req, 0, kTagRequest);
      if (absl::Status s = WaitWork(send, left + kAnswerGrace, "request"); !s.ok()) return s;
      if (absl::Status s =
              WaitWork(recv, std::max(deadline - absl::Now(), absl::ZeroDuration()) + kAnswerGrace,
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
          absl::StrCat("the publisher announced a ", length, "-byte header"));
    }
    // From here the publisher is committed; give a hung one a fair bound.
    const absl::Duration io = std::max(deadline - absl::Now(), options_.connect_timeout);
    at::Tensor body = at::empty({length}, at::kByte);
    if (length > 0) {
      std::vector<at::Tensor> v{body};
      if (absl::Status s = WaitWork(pg_->recv(v, 0, kTagBody), io, "header"); !s.ok()) {
        return s;
      }
    }
    const std::string bytes(static_cast<const char*>(body.data_ptr()), static_cast<size_t>(length));
    if (code != 0) {
      *in_step = true;
      return absl::Status(static_cast<absl::StatusCode>(code), bytes);
    }
    v1::WeightsHeader header;
    if (!header.ParseFromString(bytes)) {
      return absl::DataLossError("the publisher's header does not parse");
    }
    Stopwatch transfer;
    absl::StatusOr<BucketSet> set = DecodeHeader(header, spare());
    if (!set.ok()) return set.status();
    const std::vector<WireSegment> segments = Segments(*set, kSliceBytes);
    std::vector<c10::intrusive_ptr<c10d::Work>> slices;
    const size_t num_buckets = set->buckets.size();
    at::Tensor checksums = at::empty({static_cast<int64_t>(num_buckets)}, at::kLong);
    c10::intrusive_ptr<c10d::Work> checksums_work;
    try {
      for (const WireSegment& g : segments) {
        std::vector<at::Tensor> v{set->buckets[g.bucket].narrow(0, g.offset, g.nbytes)};
        slices.push_back(pg_->recv(v, 0, kTagBucket0 + static_cast<int>(slices.size())));
      }
      if (num_buckets > 0) {
        std::vector<at::Tensor> v{checksums};
        checksums_work = pg_->recv(v, 0, kTagChecksums);
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(e.what());
    }
    const absl::Time io_deadline = absl::Now() + io;
    auto io_left = [&] { return std::max(io_deadline - absl::Now(), absl::Milliseconds(1)); };
    // Each bucket's checksum as received, computed while the next segments
    // arrive; compared once the sender's checksums follow the buckets.
    ReceivedSums sums(*set);
    for (size_t m = 0; m < segments.size(); ++m) {
      if (absl::Status s = WaitWork(slices[m], io_left(), "bucket"); !s.ok()) return s;
      if (absl::Status s = sums.Add(segments[m]); !s.ok()) return s;
    }
    if (checksums_work) {
      if (absl::Status s = WaitWork(checksums_work, io_left(), "checksums"); !s.ok()) return s;
      std::memcpy(set->checksums.data(), checksums.data_ptr(), num_buckets * sizeof(uint64_t));
    }
    const absl::Status corrupt = sums.Verify();
    *in_step = true;
    return Fetched{*std::move(set), transfer.Seconds(), corrupt};
  }

  const TransportOptions options_;
  c10::intrusive_ptr<c10d::Store> store_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<comm::GlooDevice> device_ ABSL_GUARDED_BY(mu_);
  c10::intrusive_ptr<GlooGroup> pg_ ABSL_GUARDED_BY(mu_);
};

}  // namespace
}  // namespace trellis::weightsync::internal::gloo

namespace trellis::weightsync {

absl::StatusOr<std::unique_ptr<Receiver>> NewGlooReceiver(const TransportOptions& options) {
  return internal::NewSlotReceiver<internal::gloo::GlooReceiver>(internal::gloo::kName, options);
}

}  // namespace trellis::weightsync
