#include "learner/internal/data_parallel.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <exception>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/gloo_pair.h"
#include "comm/tcp_store.h"
#include "learner/internal/group_common.h"
#include "learner/internal/nccl_group.h"

namespace trellis::learner::internal {
namespace {

using PG = comm::GlooGroup;

// A group of one: every collective is the identity and moves nothing.
class SoloGroup final : public DataParallelGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::Status AllReduceSum(const std::vector<torch::Tensor>&) override {
    return absl::OkStatus();
  }
  absl::Status Broadcast(const std::vector<torch::Tensor>&, const std::vector<int>&) override {
    return absl::OkStatus();
  }
  absl::Status AllReduceSum(std::vector<double>&) override { return absl::OkStatus(); }
  absl::StatusOr<std::function<absl::Status()>> StartAllGather(
      const torch::Tensor& full, const torch::Tensor& shard) override {
    torch::NoGradGuard no_grad;
    full.copy_(shard);
    return std::function<absl::Status()>([] { return absl::OkStatus(); });
  }
  absl::Status ReduceScatterSum(const torch::Tensor& shard, const torch::Tensor& full) override {
    torch::NoGradGuard no_grad;
    shard.copy_(full);
    return absl::OkStatus();
  }
  Traffic TakeTraffic() override { return {}; }
  int64_t buffer_bytes() const override { return 0; }
};

class GlooGroup final : public MeteredGroup {
 public:
  GlooGroup(const GroupOptions& options, c10::intrusive_ptr<c10d::Store> store,
            c10::intrusive_ptr<PG> pg)
      : options_(options), store_(std::move(store)), pg_(std::move(pg)) {}

  int rank() const override { return options_.member.rank; }
  int size() const override { return options_.member.size; }

  absl::Status AllReduceSum(const std::vector<torch::Tensor>& tensors) override {
    return Run(PackBuckets(tensors, {}, options_.bucket_bytes), "gradient all-reduce",
               [this](std::vector<at::Tensor>& buffer, const Bucket&) {
                 return pg_->allreduce(buffer);
               });
  }

  absl::Status Broadcast(const std::vector<torch::Tensor>& tensors,
                         const std::vector<int>& owners) override {
    if (absl::Status s = CheckOwners(options_, tensors.size(), owners.size()); !s.ok()) return s;
    return Run(PackBuckets(tensors, owners, options_.bucket_bytes), "parameter broadcast",
               [this](std::vector<at::Tensor>& buffer, const Bucket& bucket) {
                 c10d::BroadcastOptions opts;
                 opts.rootRank = bucket.owner;
                 return pg_->broadcast(buffer, opts);
               });
  }

  absl::Status AllReduceSum(std::vector<double>& values) override {
    return SumScalars(*this, values, torch::kCPU);
  }

  absl::StatusOr<std::function<absl::Status()>> StartAllGather(
      const torch::Tensor& full, const torch::Tensor& shard) override {
    const absl::Time began = absl::Now();
    c10::intrusive_ptr<c10d::Work> work;
    try {
      at::Tensor out = full, in = shard;
      work = pg_->all_gather_single(out, in);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat(options_.worker_id, ": parameter all-gather: ", e.what()));
    }
    const int64_t bytes = static_cast<int64_t>(full.nbytes());
    return std::function<absl::Status()>([this, work, bytes, began] {
      if (absl::Status s = Wait(work, "parameter all-gather"); !s.ok()) return s;
      Moved(bytes);
      Took(began);
      return absl::OkStatus();
    });
  }

  absl::Status ReduceScatterSum(const torch::Tensor& shard, const torch::Tensor& full) override {
    const absl::Time began = absl::Now();
    c10::intrusive_ptr<c10d::Work> work;
    try {
      at::Tensor out = shard, in = full;
      work = pg_->reduce_scatter_single(out, in);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat(options_.worker_id, ": gradient reduce-scatter: ", e.what()));
    }
    if (absl::Status s = Wait(work, "gradient reduce-scatter"); !s.ok()) return s;
    Buffered(full.nbytes());
    Moved(full.nbytes());
    Took(began);
    return absl::OkStatus();
  }

 private:
  // Waits for `work`, its failure naming this rank.
  absl::Status Wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
    return OfRank(options_, comm::WaitWork(work, options_.timeout, what));
  }

  // Starts `start` on every bucket's flat buffer, waits for them all and
  // copies the results back.
  template <typename Start>
  absl::Status Run(const std::vector<Bucket>& buckets, const char* what, Start start) {
    const absl::Time began = absl::Now();
    std::vector<std::vector<at::Tensor>> buffers;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    try {
      for (const Bucket& bucket : buckets) {
        buffers.push_back({Flatten(bucket)});
        Buffered(bucket.bytes);
        works.push_back(start(buffers.back(), bucket));
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat(options_.worker_id, ": ", what, ": ", e.what()));
    }
    for (size_t i = 0; i < works.size(); ++i) {
      if (absl::Status s = Wait(works[i], what); !s.ok()) return s;
      Unflatten(buffers[i][0], buckets[i]);
      Moved(buckets[i].bytes);
    }
    Took(began);
    return absl::OkStatus();
  }

  const GroupOptions options_;
  // Kept alive for the process group's lifetime.
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<PG> pg_;
};

absl::Status CheckOptions(const GroupOptions& o) {
  const std::string where = absl::StrCat(o.worker_id, ": learner group: ");
  const GroupMember& m = o.member;
  if (m.size < 1 || m.rank < 0 || m.rank >= m.size) {
    return absl::InvalidArgumentError(absl::StrCat(where, "rank ", m.rank,
                                                   " is not in a group of size ", m.size));
  }
  if (m.size > 1 && (m.store_host.empty() || m.store_port <= 0 || m.store_port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat(where, "store address \"", m.store_host, ":",
                                                   m.store_port,
                                                   "\": expected a host and a port in 1..65535"));
  }
  if (!o.device.is_cpu() && !o.device.is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "device ", o.device.str(),
                                                   ": expected the CPU or a CUDA device"));
  }
  if (o.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "timeout must be positive"));
  }
  if (o.bucket_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "bucket_bytes must be positive, got ", o.bucket_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataParallelGroup>> DataParallelGroup::Join(
    const GroupOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  const GroupMember& m = options.member;
  if (m.size == 1) return std::unique_ptr<DataParallelGroup>(std::make_unique<SoloGroup>());
  const bool nccl = options.device.is_cuda();
  if (nccl) {
    if (absl::Status s = NcclGroupAvailable(options); !s.ok()) return s;
  }
  const std::string where =
      absl::StrCat(options.worker_id, ": learner group rendezvous at ", m.store_host, ":",
                   m.store_port, " (rank ", m.rank, " of ", m.size, "): ");
  const bool host = m.rank == 0;
  if (!host) {
    if (absl::Status s =
            comm::WaitForListener(m.store_host, m.store_port, absl::Now() + options.timeout);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(where, s.message()));
    }
  }
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store =
      comm::ConnectStore(m.store_host, m.store_port, host, options.timeout, m.secret);
  if (!store.ok()) {
    return absl::Status(store.status().code(), absl::StrCat(where, store.status().message()));
  }
  if (nccl) {
    absl::StatusOr<std::unique_ptr<DataParallelGroup>> group =
        JoinNcclGroup(options, *std::move(store));
    if (!group.ok()) {
      return absl::Status(group.status().code(), absl::StrCat(where, group.status().message()));
    }
    return group;
  }
  absl::StatusOr<std::shared_ptr<comm::GlooDevice>> device =
      comm::NewGlooDevice(m.store_host, m.local_host);
  if (!device.ok()) {
    return absl::Status(device.status().code(), absl::StrCat(where, device.status().message()));
  }
  absl::StatusOr<c10::intrusive_ptr<PG>> pg =
      comm::JoinGlooGroup(*store, "learner-group", m.rank, m.size, *device, options.timeout);
  if (!pg.ok()) return absl::Status(pg.status().code(), absl::StrCat(where, pg.status().message()));
  return std::unique_ptr<DataParallelGroup>(
      std::make_unique<GlooGroup>(options, *std::move(store), *std::move(pg)));
}

std::pair<int64_t, int64_t> RankRows(int64_t rows, int rank, int ranks) {
  const int64_t base = rows / ranks;
  const int64_t extra = rows % ranks;
  const int64_t first = rank * base + std::min<int64_t>(rank, extra);
  return {first, first + base + (rank < extra ? 1 : 0)};
}

std::vector<int> ShardByBytes(const std::vector<int64_t>& bytes, int ranks) {
  std::vector<size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&bytes](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<int64_t> load(ranks, 0);
  std::vector<int> owners(bytes.size(), 0);
  for (size_t i : order) {
    const int rank = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owners[i] = rank;
    load[rank] += bytes[i];
  }
  return owners;
}

}  // namespace trellis::learner::internal
