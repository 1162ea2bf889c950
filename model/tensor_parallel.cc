#include "model/tensor_parallel.h"

#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/internal/nccl_all_reduce.h"
#include "model/internal/tensor_parallel_reduce.h"
#include "model/policy.h"
#include "model/shard_layout.h"

namespace trellis::model {
namespace {

constexpr int kMaxRanks = 64;

std::string ShapeText(const torch::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

}  // namespace

trellis::v1::ModelConfig TensorParallelModel::RankConfig(const trellis::v1::ModelConfig& config,
                                                         int k) {
  trellis::v1::ModelConfig rank = config;
  if (config.head_dim() == 0) rank.set_head_dim(config.d_model() / config.n_heads());
  rank.set_n_heads(config.n_heads() / k);
  rank.set_n_kv_heads(config.n_kv_heads() / k);
  rank.set_d_ff(config.d_ff() / k);
  return rank;
}

absl::StatusOr<std::unique_ptr<TensorParallelModel>> TensorParallelModel::Create(
    const trellis::v1::ModelConfig& config, int64_t vocab_size, int k,
    const trellis::v1::LoraConfig& lora) {
  if (k < 1 || k > kMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor_parallel must be in [1, ", kMaxRanks, "], got ", k));
  }
  if (k > 1 && config.num_experts() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor_parallel ", k, ": a mixture of experts is not split (tensor_parallel 1)"));
  }
  for (const auto& [field, value] :
       {std::pair{"n_heads", config.n_heads()}, std::pair{"n_kv_heads", config.n_kv_heads()},
        std::pair{"d_ff", config.d_ff()}}) {
    if (value <= 0 || value % k != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor_parallel ", k, " does not divide the model's ", field, " (", value, ")"));
    }
  }
  const trellis::v1::ModelConfig rank_config = RankConfig(config, k);
  std::vector<Transformer> ranks;
  // Nothing is drawn but LoRA's adapters, which LoadWeights overwrites.
  const std::unique_lock<std::recursive_mutex> draws = LockInitialDraws();
  for (int r = 0; r < k; ++r) {
    ranks.emplace_back(rank_config, vocab_size, Head::kLanguageModel, lora,
                       InitialValues::kOverwritten);
    ranks.back()->eval();
    for (torch::Tensor& p : ranks.back()->parameters()) p.set_requires_grad(false);
  }
  return std::unique_ptr<TensorParallelModel>(new TensorParallelModel(config, std::move(ranks)));
}

absl::StatusOr<std::unique_ptr<TensorParallelModel>> TensorParallelModel::Split(
    TransformerImpl& whole, int k, const trellis::v1::LoraConfig& lora) {
  absl::StatusOr<std::unique_ptr<TensorParallelModel>> group =
      Create(whole.config(), whole.vocab_size(), k, lora);
  if (!group.ok()) return group.status();
  const NamedTensors weights = whole.NamedWeights();
  if (!weights.empty()) (*group)->to(weights.front().second.device());
  if (absl::Status s = (*group)->LoadWeights(weights); !s.ok()) return s;
  return group;
}

TensorParallelModel::TensorParallelModel(trellis::v1::ModelConfig config,
                                         std::vector<Transformer> ranks)
    : config_(std::move(config)),
      ranks_(std::move(ranks)),
      devices_(ranks_.size(), torch::kCPU),
      reduce_(std::make_unique<internal::InMemoryAllReduce>(k())) {}

TensorParallelModel::~TensorParallelModel() = default;

absl::Status TensorParallelModel::LoadWeights(const NamedTensors& whole) {
  std::vector<int> ranks;
  std::vector<NamedTensors> pieces(k());
  for (int r = 0; r < k(); ++r) {
    ranks.push_back(r);
    for (const auto& [name, tensor] : whole) {
      const TensorSlice slice = TensorParallelSlice(name, r, k());
      if (slice.whole()) {
        pieces[r].emplace_back(name, tensor);
        continue;
      }
      if (tensor.dim() <= slice.dim || tensor.size(slice.dim) % slice.parts != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor-parallel load: ", name, " has shape ", ShapeText(tensor),
            ", which does not split into ", slice.parts, " along dimension ", slice.dim));
      }
      const int64_t size = tensor.size(slice.dim) / slice.parts;
      pieces[r].emplace_back(name, tensor.narrow(slice.dim, slice.index * size, size));
    }
  }
  return CopyIn(ranks, pieces);
}

absl::Status TensorParallelModel::LoadRankWeights(int rank, const NamedTensors& slices) {
  if (rank < 0 || rank >= k()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel load: rank ", rank, " outside [0, ", k(), ")"));
  }
  return CopyIn({rank}, {slices});
}

absl::Status TensorParallelModel::CopyIn(const std::vector<int>& ranks,
                                         const std::vector<NamedTensors>& pieces) {
  std::vector<std::map<std::string, torch::Tensor>> targets;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    std::map<std::string, torch::Tensor>& own = targets.emplace_back();
    for (auto& [name, tensor] : ranks_[r]->NamedWeights()) own.emplace(name, tensor);
    for (const auto& [name, piece] : pieces[i]) {
      const auto it = own.find(name);
      if (it == own.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor-parallel load: ", name, " is not a tensor of the model"));
      }
      if (!piece.defined() || piece.sizes() != it->second.sizes()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor-parallel load: rank ", r, " of ", k(), ": ", name, " has shape ",
                         piece.defined() ? ShapeText(piece) : "(undefined)", ", the rank holds ",
                         ShapeText(it->second)));
      }
    }
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < ranks.size(); ++i) {
    for (const auto& [name, piece] : pieces[i]) targets[i].at(name).copy_(piece);
  }
  return absl::OkStatus();
}

void TensorParallelModel::to(const torch::Device& device) {
  const std::lock_guard<std::mutex> lock(forward_mu_);
  for (Transformer& rank : ranks_) rank->to(device);
  devices_.assign(ranks_.size(), device);
  reduce_ = std::make_unique<internal::InMemoryAllReduce>(k());
  nccl_ = false;
}

absl::Status TensorParallelModel::PlaceRanks(const std::vector<torch::Device>& devices) {
  if (devices.size() != ranks_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor-parallel placement: ", devices.size(),
                                                   " devices for ", k(), " ranks"));
  }
  std::set<c10::DeviceIndex> cuda;
  for (const torch::Device& d : devices) {
    if (d.is_cuda() && d.has_index()) cuda.insert(d.index());
  }
  const bool nccl = k() > 1 && cuda.size() == ranks_.size();
  std::unique_ptr<internal::RankAllReduce> reduce;
  if (nccl) {
    absl::StatusOr<std::unique_ptr<internal::RankAllReduce>> made =
        internal::NewNcclAllReduce(devices);
    if (!made.ok()) return made.status();
    reduce = *std::move(made);
  } else {
    reduce = std::make_unique<internal::InMemoryAllReduce>(k());
  }
  const std::lock_guard<std::mutex> lock(forward_mu_);
  for (int r = 0; r < k(); ++r) ranks_[r]->to(devices[r]);
  devices_ = devices;
  reduce_ = std::move(reduce);
  nccl_ = nccl;
  return absl::OkStatus();
}

std::vector<torch::Tensor> TensorParallelModel::parameters() const {
  std::vector<torch::Tensor> all;
  for (const Transformer& rank : ranks_) {
    for (const torch::Tensor& p : rank->parameters()) all.push_back(p);
  }
  return all;
}

torch::Tensor TensorParallelModel::Hidden(const torch::Tensor& tokens,
                                          const torch::Tensor& positions,
                                          const torch::Tensor& key_valid, KVCache* cache,
                                          ExpertRouting* routing) {
  if (k() == 1) return ranks_[0]->Hidden(tokens, positions, key_valid, cache, routing);
  const std::lock_guard<std::mutex> lock(forward_mu_);
  // Each rank's view of the cache: its n_kv_heads / k heads of every layer
  // (a copy on the rank's device when the cache is elsewhere).
  std::vector<KVCache> caches(k());
  std::vector<KVCache> views(k());
  if (cache != nullptr) {
    const int64_t heads = config_.n_kv_heads() / k();
    for (int r = 0; r < k(); ++r) {
      const torch::Device& device = devices_[r];
      caches[r].length = cache->length;
      caches[r].capacity = cache->capacity;
      for (size_t l = 0; l < cache->keys.size(); ++l) {
        TORCH_CHECK(cache->keys[l].dim() == 4 && cache->keys[l].size(1) == config_.n_kv_heads(),
                    "TensorParallelModel: cache layer ", l, " holds keys of shape ",
                    cache->keys[l].sizes(), ", not ", config_.n_kv_heads(), " heads");
        views[r].keys.push_back(cache->keys[l].narrow(1, r * heads, heads));
        views[r].values.push_back(cache->values[l].narrow(1, r * heads, heads));
        caches[r].keys.push_back(views[r].keys.back().to(device));
        caches[r].values.push_back(views[r].values.back().to(device));
      }
    }
  }
  internal::RankAllReduce& reduce = *reduce_;
  const absl::Status begun = reduce.Begin();
  TORCH_CHECK(begun.ok(), "TensorParallelModel: ", begun.message());
  // After every rank has stopped (the threads below join first).
  const absl::Cleanup end = [&reduce] { reduce.End(); };
  std::vector<torch::Tensor> out(k());
  std::mutex failure_mu;
  std::exception_ptr failure;  // the first rank's to fail
  const bool grad = torch::GradMode::is_enabled();
  auto run_rank = [&](int r) {
    try {
      const torch::AutoGradMode mode(grad);
      const internal::ScopedRankReduce as_rank(&reduce, r);
      out[r] =
          ranks_[r]->Hidden(tokens, positions, key_valid, cache != nullptr ? &caches[r] : nullptr,
                            r == 0 ? routing : nullptr);
    } catch (...) {
      {
        const std::lock_guard<std::mutex> lock(failure_mu);
        if (!failure) failure = std::current_exception();
      }
      reduce.Abort();
    }
  };
  {
    std::vector<std::jthread> threads;
    try {
      for (int r = 1; r < k(); ++r) threads.emplace_back(run_rank, r);
    } catch (...) {
      reduce.Abort();  // the started ranks stop at their first all-reduce
      throw;
    }
    run_rank(0);
  }  // joined
  if (failure) std::rethrow_exception(failure);
  if (cache != nullptr) {
    // The new positions of the ranks that computed on copies.
    const int64_t past = cache->length, added = caches[0].length - past;
    torch::NoGradGuard no_grad;
    for (int r = 0; r < k(); ++r) {
      for (size_t l = 0; l < views[r].keys.size(); ++l) {
        if (caches[r].keys[l].is_same(views[r].keys[l])) continue;
        views[r].keys[l].narrow(2, past, added).copy_(caches[r].keys[l].narrow(2, past, added));
        views[r].values[l].narrow(2, past, added).copy_(caches[r].values[l].narrow(2, past, added));
      }
    }
    cache->length = caches[0].length;
  }
  return out[0];
}

torch::Tensor TensorParallelModel::ApplyHead(const torch::Tensor& hidden) {
  return ranks_[0]->ApplyHead(hidden);
}

KVCache TensorParallelModel::NewCache(int64_t batch, int64_t capacity) const {
  KVCache cache = ranks_[0]->NewCache(batch, capacity);
  for (std::vector<torch::Tensor>* layers : {&cache.keys, &cache.values}) {
    for (torch::Tensor& t : *layers) t = torch::cat(std::vector<torch::Tensor>(k(), t), 1);
  }
  return cache;
}

}  // namespace trellis::model
