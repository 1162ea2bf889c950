#include "weightsync/reshard.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "weightsync/internal/inprocess_testing.h"
#include "weightsync/internal/pull_receiver.h"
#include "weightsync/internal/staging.h"

namespace trellis::weightsync {
namespace {

const TransportRegistry& Builtins() {
  static const TransportRegistry* const registry = [] {
    auto* r = new TransportRegistry();
    // A fresh registry: the built-ins cannot collide.
    RegisterBuiltinTransports(*r).IgnoreError();
    return r;
  }();
  return *registry;
}

absl::Status CheckRank(const ReshardPlan& plan, const ReshardOptions& options, const char* role,
                       int rank, int ranks) {
  if (rank < 0 || rank >= ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshard: ", role, " rank must be in 0..", ranks - 1, ", got ", rank));
  }
  const size_t pairs = static_cast<size_t>(plan.learner_ranks()) * plan.actor_ranks();
  if (options.ports.size() != pairs) {
    return absl::InvalidArgumentError(absl::StrCat("reshard: ", plan.learner_ranks(), " x ",
                                                   plan.actor_ranks(), " ranks need ", pairs,
                                                   " ports, got ", options.ports.size()));
  }
  if (!options.learner_hosts.empty() &&
      options.learner_hosts.size() != static_cast<size_t>(plan.learner_ranks())) {
    return absl::InvalidArgumentError(absl::StrCat("reshard: ", plan.learner_ranks(),
                                                   " learner ranks need as many hosts, got ",
                                                   options.learner_hosts.size()));
  }
  return absl::OkStatus();
}

// One link's options: the pair's store; the receiver slots (one per
// actor replica) as options.transport has them. Its receiver writes in
// place where the transport can: the slices it fills are the receiver's
// own, or the caller's `into`, which a failed Receive may leave written.
TransportOptions LinkOptions(const ReshardPlan& plan, const ReshardOptions& options, int learner,
                             int actor) {
  TransportOptions o = options.transport;
  o.host = options.PairHost(learner);
  o.port = options.PairPort(plan, learner, actor);
  o.receive_in_place = true;
  return o;
}

// The name of a move on the wire: its tensor and where it lands.
std::string MoveName(const ReshardPlan& plan, const ReshardRun& r) {
  return absl::StrCat(plan.units()[r.unit].entries[r.entry].name, "@", r.dst);
}

absl::Status Prefixed(const absl::Status& s, const std::string& where) {
  return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
}

// `into` as ReshardReceiver::Receive takes it: one contiguous tensor of each
// slice's shape and dtype, in the slices' order.
absl::Status CheckInto(const std::vector<ReshardPlan::Slice>& slices,
                       const std::vector<at::Tensor>& into) {
  if (into.size() != slices.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(slices.size(), " slices to fill, given ", into.size(), " tensors"));
  }
  for (size_t i = 0; i < slices.size(); ++i) {
    const at::Tensor& t = into[i];
    if (!t.defined() || !t.sizes().equals(slices[i].shape) ||
        t.scalar_type() != slices[i].dtype || !t.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          slices[i].name, " must be a contiguous ", c10::toString(slices[i].dtype), " tensor of ",
          c10::str(c10::IntArrayRef(slices[i].shape)), ", given ",
          t.defined() ? c10::str(t.sizes()) : "an undefined tensor"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ReshardOptions::PairHost(int learner) const {
  return learner_hosts.empty() ? transport.host : learner_hosts[learner];
}

int ReshardOptions::PairPort(const ReshardPlan& plan, int learner, int actor) const {
  return ports[learner * plan.actor_ranks() + actor];
}

absl::StatusOr<std::unique_ptr<ReshardSender>> ReshardSender::Start(
    std::shared_ptr<const ReshardPlan> plan, int learner_rank, const ReshardOptions& options,
    const TransportRegistry* registry) {
  if (absl::Status s = CheckRank(*plan, options, "learner", learner_rank, plan->learner_ranks());
      !s.ok()) {
    return s;
  }
  if (registry == nullptr) registry = &Builtins();
  std::unique_ptr<ReshardSender> sender(new ReshardSender(plan, learner_rank));
  for (int k = 0; k < plan->actor_ranks(); ++k) {
    absl::StatusOr<std::unique_ptr<Publisher>> p = registry->NewPublisher(
        options.transport_name, LinkOptions(*plan, options, learner_rank, k));
    if (!p.ok()) {
      return Prefixed(p.status(), absl::StrCat("reshard learner rank ", learner_rank,
                                               ", link to actor rank ", k));
    }
    sender->publishers_.push_back(*std::move(p));
  }
  sender->bucket_bytes_ = options.transport.bucket_bytes;
  return sender;
}

absl::StatusOr<v1::WeightSyncStats> ReshardSender::Publish(int64_t version,
                                                           const std::vector<at::Tensor>& shards) {
  const std::vector<model::FlatUnit>& units = plan_->units();
  if (shards.size() != units.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshard: ", units.size(), " units need as many shards, got ", shards.size()));
  }
  std::vector<at::Tensor> flat;
  for (size_t u = 0; u < units.size(); ++u) {
    const at::Tensor& t = shards[u];
    if (!t.defined() || t.dim() != 1 || t.numel() != units[u].shard_numel ||
        t.scalar_type() != plan_->dtype(static_cast<int>(u))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reshard: the shard of unit '", units[u].name, "' must be a 1-D ", units[u].dtype,
          " tensor of ", units[u].shard_numel, " elements, got ",
          t.defined() ? t.toString() + " " + c10::str(t.sizes()) : "an undefined tensor"));
    }
    flat.push_back(t.contiguous());
  }
  v1::WeightSyncStats total;
  total.set_version(version);
  // Every actor rank's link packs at once, each streaming its buckets as
  // they are packed.
  const int k_ranks = plan_->actor_ranks();
  std::vector<absl::StatusOr<v1::WeightSyncStats>> results(k_ranks, absl::UnknownError(""));
  {
    std::vector<std::jthread> links;
    for (int k = 0; k < k_ranks; ++k) {
      NamedTensors moves;
      for (const ReshardRun& r : plan_->Moves(rank_, k, bucket_bytes_)) {
        const at::Tensor& shard = flat[r.unit];
        at::Tensor move = shard.as_strided({r.rows, r.row_numel}, {r.src_stride, 1},
                                           shard.storage_offset() + r.src);
        // A move that fills its slice travels in the slice's shape: the
        // receiver may then take its bucket's memory (Receive).
        const ReshardPlan::Slice& slice = plan_->SliceOf(k, r.unit, r.entry);
        if (slice.FilledBy(r)) move = move.view(slice.shape);
        moves.emplace_back(MoveName(*plan_, r), std::move(move));
      }
      links.emplace_back([this, &results, k, version, moves = std::move(moves)] {
        results[k] = publishers_[k]->Publish(version, moves);
      });
    }
  }
  for (int k = 0; k < k_ranks; ++k) {
    const absl::StatusOr<v1::WeightSyncStats>& stats = results[k];
    if (!stats.ok()) {
      return Prefixed(stats.status(),
                      absl::StrCat("reshard learner rank ", rank_, ", publishing version ", version,
                                   " to actor rank ", k));
    }
    total.set_bytes(total.bytes() + stats->bytes());
    total.set_tensors(total.tensors() + stats->tensors());
    total.set_buckets(total.buckets() + stats->buckets());
    total.set_gather_seconds(total.gather_seconds() + stats->gather_seconds());
    total.set_transfer_seconds(total.transfer_seconds() + stats->transfer_seconds());
  }
  return total;
}

int64_t ReshardSender::StagedBytes() {
  int64_t bytes = 0;
  for (const auto& p : publishers_) {
    if (auto* staged = dynamic_cast<internal::StagedSender*>(p.get()); staged != nullptr) {
      bytes += staged->stage()->StagedBytes();
    }
  }
  return bytes;
}

absl::Status ReshardSender::CorruptForTesting(int actor_rank, int bucket) {
  return internal::CorruptBucketForTesting(*publishers_.at(actor_rank), bucket);
}

absl::StatusOr<std::unique_ptr<ReshardReceiver>> ReshardReceiver::Start(
    std::shared_ptr<const ReshardPlan> plan, int actor_rank, const ReshardOptions& options,
    const TransportRegistry* registry) {
  if (absl::Status s = CheckRank(*plan, options, "actor", actor_rank, plan->actor_ranks());
      !s.ok()) {
    return s;
  }
  if (registry == nullptr) registry = &Builtins();
  std::unique_ptr<ReshardReceiver> receiver(new ReshardReceiver(plan, actor_rank));
  absl::MutexLock lock(&receiver->mu_);
  for (int n = 0; n < plan->learner_ranks(); ++n) {
    absl::StatusOr<std::unique_ptr<Receiver>> r =
        registry->NewReceiver(options.transport_name, LinkOptions(*plan, options, n, actor_rank));
    if (!r.ok()) {
      return Prefixed(r.status(), absl::StrCat("reshard actor rank ", actor_rank,
                                               ", link from learner rank ", n));
    }
    receiver->receivers_.push_back(*std::move(r));
  }
  receiver->bucket_bytes_ = options.transport.bucket_bytes;
  return receiver;
}

absl::StatusOr<ReshardReceived> ReshardReceiver::Receive(int64_t version, absl::Duration timeout,
                                                         const std::vector<at::Tensor>* into) {
  absl::MutexLock lock(&mu_);
  const std::vector<ReshardPlan::Slice>& slices = plan_->Slices(rank_);
  if (into != nullptr) {
    if (absl::Status s = CheckInto(slices, *into); !s.ok()) {
      return Prefixed(s, absl::StrCat("reshard actor rank ", rank_));
    }
  }
  const int n_ranks = plan_->learner_ranks();
  std::vector<std::vector<ReshardRun>> moves(n_ranks);
  for (int n = 0; n < n_ranks; ++n) moves[n] = plan_->Moves(n, rank_, bucket_bytes_);
  last_.resize(slices.size());
  for (size_t i = 0; i < slices.size() && into == nullptr; ++i) {
    // A slice is filled again once the caller let go of it and it holds no
    // link's bucket (no fresh pages to fault in); else it is a fresh tensor
    // (whose pages a link that cannot receive in place never touches: it
    // adopts its bucket's memory into a slice one move fills, LoadInto), and
    // the slices handed back before keep theirs.
    at::Tensor& t = last_[i];
    if (!t.defined() || t.use_count() != 1 || t.storage().use_count() != 1) {
      t = at::empty(slices[i].shape, at::TensorOptions().dtype(slices[i].dtype));
    }
  }
  const std::vector<at::Tensor>& targets = into != nullptr ? *into : last_;
  std::vector<NamedTensors> dst(n_ranks);
  for (int n = 0; n < n_ranks; ++n) {
    for (const ReshardRun& r : moves[n]) {
      const ReshardPlan::Slice& s = plan_->SliceOf(rank_, r.unit, r.entry);
      const at::Tensor& slice = targets[&s - slices.data()];
      dst[n].emplace_back(
          MoveName(*plan_, r),
          s.FilledBy(r) ? slice
                        : slice.view({-1}).narrow(0, r.dst, r.numel()).view({r.rows, r.row_numel}));
    }
  }
  // The newest version at or past `version` that every learner rank
  // serves: a rank that has moved on is asked again by all.
  ReshardReceived got;
  got.version = version;
  std::vector<absl::StatusOr<v1::WeightSyncStats>> results;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    results.assign(n_ranks, absl::UnknownError(""));
    {
      std::vector<std::jthread> links;
      for (int n = 0; n < n_ranks; ++n) {
        Receiver* link = receivers_[n].get();
        links.emplace_back([&, n, link] {
          results[n] = link->Receive(got.version, dst[n], deadline - absl::Now());
        });
      }
    }
    int64_t newest = got.version;
    for (int n = 0; n < n_ranks; ++n) {
      if (!results[n].ok()) {
        return Prefixed(results[n].status(),
                        absl::StrCat("reshard actor rank ", rank_, ", version ", got.version,
                                     " from learner rank ", n));
      }
      newest = std::max(newest, results[n]->version());
    }
    if (newest == got.version) break;
    got.version = newest;
  }
  for (int n = 0; n < n_ranks; ++n) got.bytes += results[n]->bytes();
  received_bytes_ += got.bytes;
  for (size_t i = 0; i < slices.size(); ++i) got.tensors.emplace_back(slices[i].name, targets[i]);
  return got;
}

int64_t ReshardReceiver::received_bytes() {
  absl::MutexLock lock(&mu_);
  return received_bytes_;
}

int64_t ReshardReceiver::BucketBytes() {
  absl::MutexLock lock(&mu_);
  int64_t bytes = 0;
  for (const auto& r : receivers_) {
    if (auto* pull = dynamic_cast<internal::PullReceiver*>(r.get()); pull != nullptr) {
      bytes += pull->SpareBytes();
    }
  }
  return bytes;
}

}  // namespace trellis::weightsync
