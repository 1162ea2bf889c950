#include "weightsync/reshard_ends.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "comm/tcp_store.h"

namespace trellis::weightsync {
namespace {

// The plan both ends compute: the units in float32 over K actor ranks.
absl::StatusOr<std::shared_ptr<const ReshardPlan>> PlanOf(std::vector<model::FlatUnit> units,
                                                          int actor_ranks) {
  if (units.empty()) return absl::InvalidArgumentError("reshard: the model has no tensors");
  for (model::FlatUnit& u : units) u.dtype = "F32";
  absl::StatusOr<ReshardPlan> plan = ReshardPlan::Make(std::move(units), actor_ranks);
  if (!plan.ok()) return plan.status();
  return std::make_shared<const ReshardPlan>(*std::move(plan));
}

// The directory's key: the link ports, actor rank order, comma-separated.
constexpr char kLinksKey[] = "trellis/reshard/links";

absl::Status CheckLearnerRanks(const ReshardPlan& plan, int expected) {
  if (plan.learner_ranks() == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("reshard: the layout is over ",
                                                 plan.learner_ranks(),
                                                 " learner ranks, the job has ", expected));
}

}  // namespace

std::string RankTensorName(int rank, std::string_view name) {
  return absl::StrCat("tp", rank, "/", std::string(name));
}

struct ShardPublisher::Directory {
  c10::intrusive_ptr<c10d::Store> store;
};

ShardPublisher::ShardPublisher(ReshardEndOptions options, int learner_rank)
    : options_(std::move(options)), rank_(learner_rank) {}

ShardPublisher::~ShardPublisher() = default;

absl::Status ShardPublisher::Bind(std::vector<model::FlatUnit> units) {
  absl::StatusOr<std::shared_ptr<const ReshardPlan>> plan =
      PlanOf(std::move(units), options_.actor_ranks);
  if (!plan.ok()) return plan.status();
  if (absl::Status s = CheckLearnerRanks(**plan, options_.learner_ranks); !s.ok()) return s;
  const TransportOptions& t = options_.transport;
  ReshardOptions links;
  links.transport = t;
  links.transport_name = options_.transport_name;
  links.ports.assign(static_cast<size_t>(options_.learner_ranks) * options_.actor_ranks, 0);
  std::vector<std::string> listed;
  for (int k = 0; k < options_.actor_ranks; ++k) {
    absl::StatusOr<int> port = comm::PickFreeTcpPort(t.host);
    if (!port.ok()) return port.status();
    links.ports[rank_ * options_.actor_ranks + k] = *port;
    listed.push_back(absl::StrCat(*port));
  }
  absl::StatusOr<std::unique_ptr<ReshardSender>> sender =
      ReshardSender::Start(*plan, rank_, links);
  if (!sender.ok()) return sender.status();
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store =
      comm::ConnectStore(t.host, t.port, /*server=*/true, t.connect_timeout, t.secret);
  if (!store.ok()) return store.status();
  const std::string value = absl::StrJoin(listed, ",");
  try {
    (*store)->set(kLinksKey, std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("reshard learner rank ", rank_,
                                               ": listing its links: ", e.what()));
  }
  absl::MutexLock lock(&mu_);
  sender_ = *std::move(sender);
  directory_ = std::make_unique<Directory>(Directory{*std::move(store)});
  return absl::OkStatus();
}

absl::StatusOr<v1::WeightSyncStats> ShardPublisher::PublishShards(
    int64_t version, const std::vector<at::Tensor>& shards) {
  absl::MutexLock lock(&mu_);
  if (sender_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("reshard learner rank ", rank_, ": publishing before the layout is bound"));
  }
  // Host memory for every transport but nccl, which moves device memory.
  const bool host = options_.transport_name != "nccl";
  std::vector<at::Tensor> wide;
  for (const at::Tensor& s : shards) {
    wide.push_back(host ? s.detach().to(at::kCPU, at::kFloat) : s.detach().to(at::kFloat));
  }
  return sender_->Publish(version, wide);
}

absl::StatusOr<v1::WeightSyncStats> ShardPublisher::Publish(int64_t version, const NamedTensors&) {
  return absl::FailedPreconditionError(
      absl::StrCat("reshard learner rank ", rank_, ": version ", version,
                   " was given as whole tensors; a resharding sync publishes each rank's shards"));
}

int64_t ShardPublisher::StagedBytes() {
  absl::MutexLock lock(&mu_);
  return sender_ == nullptr ? 0 : sender_->StagedBytes();
}

SliceReceiver::SliceReceiver(ReshardEndOptions options,
                             std::vector<std::pair<std::string, int>> directories)
    : options_(std::move(options)), directories_(std::move(directories)) {}

absl::Status SliceReceiver::Bind(std::vector<model::FlatUnit> units) {
  absl::StatusOr<std::shared_ptr<const ReshardPlan>> plan =
      PlanOf(std::move(units), options_.actor_ranks);
  if (!plan.ok()) return plan.status();
  if (absl::Status s = CheckLearnerRanks(**plan, learner_ranks()); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  plan_ = *std::move(plan);
  return absl::OkStatus();
}

absl::Status SliceReceiver::Connect(absl::Duration timeout) {
  const int k_ranks = options_.actor_ranks;
  ReshardOptions links;
  links.transport = options_.transport;
  links.transport_name = options_.transport_name;
  for (size_t n = 0; n < directories_.size(); ++n) {
    const auto& [host, port] = directories_[n];
    const std::string where = absl::StrCat("reshard actor: learner rank ", n, "'s directory at ",
                                           host, ":", port);
    absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store =
        comm::ConnectStore(host, port, /*server=*/false, timeout, options_.transport.secret);
    if (!store.ok()) {
      return absl::Status(store.status().code(),
                          absl::StrCat(where, ": ", store.status().message()));
    }
    std::string value;
    try {
      const std::vector<uint8_t> got = (*store)->get(kLinksKey);
      value.assign(got.begin(), got.end());
    } catch (const std::exception& e) {
      return absl::DeadlineExceededError(absl::StrCat(where, ": no links listed: ", e.what()));
    }
    const std::vector<std::string> ports = absl::StrSplit(value, ',');
    for (const std::string& p : ports) {
      int parsed = 0;
      if (!absl::SimpleAtoi(p, &parsed) || ports.size() != static_cast<size_t>(k_ranks)) {
        return absl::DataLossError(absl::StrCat(where, ": expected ", k_ranks,
                                                " link ports, got '", value, "'"));
      }
      links.ports.push_back(parsed);
    }
    links.learner_hosts.push_back(host);
  }
  std::vector<std::unique_ptr<ReshardReceiver>> ranks;
  for (int k = 0; k < k_ranks; ++k) {
    absl::StatusOr<std::unique_ptr<ReshardReceiver>> r = ReshardReceiver::Start(plan_, k, links);
    if (!r.ok()) return r.status();
    ranks.push_back(*std::move(r));
  }
  ranks_ = std::move(ranks);
  return absl::OkStatus();
}

absl::StatusOr<v1::WeightSyncStats> SliceReceiver::Receive(int64_t min_version,
                                                           const NamedTensors& dst,
                                                           absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (plan_ == nullptr) {
    return absl::FailedPreconditionError(
        "reshard actor: receiving before the model's layout is bound");
  }
  // Every slice of every rank is one tensor of `dst`, found by name before
  // anything is written.
  const int k_ranks = options_.actor_ranks;
  std::map<std::string, const at::Tensor*, std::less<>> by_name;
  for (const auto& [name, t] : dst) by_name[name] = &t;
  std::vector<std::vector<at::Tensor>> into(k_ranks);
  for (int k = 0; k < k_ranks; ++k) {
    for (const ReshardPlan::Slice& s : plan_->Slices(k)) {
      const std::string name = k_ranks > 1 ? RankTensorName(k, s.name) : s.name;
      auto it = by_name.find(name);
      if (it == by_name.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("reshard actor: nothing to receive ", name, " into"));
      }
      if (!it->second->sizes().equals(s.shape)) {
        return absl::FailedPreconditionError(
            absl::StrCat("reshard actor: ", name, " is ", c10::str(it->second->sizes()),
                         ", the sync carries ", c10::str(c10::IntArrayRef(s.shape))));
      }
      into[k].push_back(*it->second);
      by_name.erase(it);
    }
  }
  if (!by_name.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "reshard actor: the sync carries no tensor ", by_name.begin()->first));
  }
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  if (ranks_.empty()) {
    if (absl::Status s = Connect(timeout); !s.ok()) return s;
  }
  // The same version on every rank: the newest one any rank got.
  std::vector<int64_t> versions(k_ranks, -1);
  int64_t want = min_version;
  v1::WeightSyncStats stats;
  while (*std::min_element(versions.begin(), versions.end()) != want) {
    std::vector<absl::StatusOr<ReshardReceived>> got(k_ranks, absl::UnknownError(""));
    {
      std::vector<std::jthread> links;
      for (int k = 0; k < k_ranks; ++k) {
        if (versions[k] == want) continue;
        links.emplace_back([&, k] {
          got[k] = ranks_[k]->Receive(want, deadline - absl::Now(), &into[k]);
        });
      }
    }
    for (int k = 0; k < k_ranks; ++k) {
      if (versions[k] == want) continue;
      if (!got[k].ok()) return got[k].status();
      versions[k] = got[k]->version;
      stats.set_bytes(stats.bytes() + got[k]->bytes);
    }
    want = *std::max_element(versions.begin(), versions.end());
  }
  stats.set_version(want);
  stats.set_tensors(static_cast<int64_t>(dst.size()));
  stats.set_transfer_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  return stats;
}

}  // namespace trellis::weightsync
