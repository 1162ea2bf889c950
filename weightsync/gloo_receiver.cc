// The receiving end of the gloo transport (weightsync/gloo_transport.h):
// one receiver slot, connecting lazily and pulling the newest version.

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
using internal::gloo::kMaxHeaderBytes;
using internal::gloo::kSliceBytes;
using internal::gloo::kAnswerGrace;
using internal::gloo::GenerationKey;
using internal::gloo::IsLoopback;
using internal::gloo::WaitWork;
using internal::gloo::ConnectPair;
using internal::gloo::CheckEndpoint;

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
    // The buckets are this receiver's own (spare_ reuses only free ones).
    return internal::FinishReceive(*set, dst, transfer_seconds_, spare_.buckets());
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

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> NewGlooReceiver(
    const GlooEndpoint& endpoint, TransportOptions options) {
  if (absl::Status s = CheckEndpoint(endpoint); !s.ok()) return s;
  if (absl::Status s = internal::CheckReceiverIndex("weightsync gloo", /*sender=*/false,
                                                 endpoint.receiver_index,
                                                 endpoint.num_receivers);
      !s.ok()) {
    return s;
  }
  return std::make_unique<GlooReceiver>(endpoint);
}

}  // namespace trellis::weightsync
