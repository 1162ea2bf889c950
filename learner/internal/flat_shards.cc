#include "learner/internal/flat_shards.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/flat_layout.h"
#include "model/safetensors_dtypes.h"

namespace trellis::learner::internal {
namespace {

// A whole buffer's memory comes and goes while the model's tensors stay
// views of it (their sizes and strides kept), so autograd's saved views see
// the gathered values again after a free and a gather.
void FreeStorage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void AllocateStorage(const torch::Tensor& t, size_t bytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (s->nbytes() == bytes) return;
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

}  // namespace

int64_t FlatShards::Unit::bytes() const {
  int64_t total = 0;
  for (const Buffer& b : buffers) {
    total += b.layout.ranks * b.layout.shard_numel * static_cast<int64_t>(b.shard.element_size());
  }
  return total;
}

FlatShards::FlatShards(model::Transformer policy, DataParallelGroup* group, int zero_stage,
                       std::string worker_id)
    : policy_(std::move(policy)),
      group_(group),
      zero_stage_(zero_stage),
      worker_id_(std::move(worker_id)) {}

FlatShards::~FlatShards() { policy_->set_layer_hooks(nullptr); }

absl::StatusOr<std::unique_ptr<FlatShards>> FlatShards::Make(model::Transformer policy,
                                                             DataParallelGroup* group,
                                                             int zero_stage,
                                                             std::string worker_id) {
  std::unique_ptr<FlatShards> shards(
      new FlatShards(policy, group, zero_stage, std::move(worker_id)));
  const size_t units = static_cast<size_t>(policy->config().n_layers()) + 1;
  const int ranks = group->size(), rank = group->rank();
  std::map<std::string, torch::Tensor> by_name;
  const model::NamedTensors weights = policy->NamedWeights();
  for (const auto& [name, p] : weights) by_name.emplace(name, p);
  torch::NoGradGuard no_grad;
  shards->units_.resize(units);
  for (model::FlatUnit& layout : model::FlatUnitsOf(weights, ranks)) {
    const size_t u = model::ModelUnitIndex(layout.entries.front().name);
    if (u >= units) {
      return absl::InternalError(absl::StrCat(shards->worker_id_, ": ", layout.name,
                                              " is not one of the policy's ", units - 1,
                                              " blocks"));
    }
    Buffer b;
    for (const model::FlatEntry& e : layout.entries) b.params.push_back(by_name.at(e.name));
    size_t trained = 0;
    for (const torch::Tensor& p : b.params) trained += p.requires_grad();
    if (trained != 0 && trained != b.params.size()) {
      return absl::UnimplementedError(absl::StrCat(
          shards->worker_id_, ": memory.zero_stage ", zero_stage, ": ", layout.name,
          " mixes trained and frozen tensors, which one flat shard cannot hold"));
    }
    b.trained = trained != 0;
    b.full = torch::zeros({ranks * layout.shard_numel}, b.params.front().options());
    for (size_t i = 0; i < b.params.size(); ++i) {
      const model::FlatEntry& e = layout.entries[i];
      const torch::Tensor& p = b.params[i];
      torch::Tensor slot = b.full.narrow(0, e.offset, e.numel());
      slot.copy_(p.detach().reshape(-1));
      p.set_data(slot.view(p.sizes()));
      shards->held_.insert(p.unsafeGetTensorImpl());
    }
    b.shard = b.full.narrow(0, rank * layout.shard_numel, layout.shard_numel).clone();
    b.master = b.shard.scalar_type() == torch::kFloat32 ? b.shard : b.shard.to(torch::kFloat32);
    b.master.requires_grad_(b.trained);
    b.layout = std::move(layout);
    shards->units_[u].buffers.push_back(std::move(b));
  }
  for (size_t u = 0; u < units; ++u) {
    shards->units_[u].gathered = true;
    shards->gathered_bytes_ += shards->units_[u].bytes();
  }
  if (zero_stage == 3) {
    for (Unit& unit : shards->units_) shards->Release(unit);
  }
  shards->gathered_peak_ = shards->gathered_bytes_;
  policy->set_layer_hooks(shards.get());
  return shards;
}

std::vector<torch::Tensor> FlatShards::decayed() const {
  std::vector<torch::Tensor> out;
  for (const Unit& unit : units_) {
    for (const Buffer& b : unit.buffers) {
      if (b.trained && b.params.front().dim() >= 2) out.push_back(b.master);
    }
  }
  return out;
}

std::vector<torch::Tensor> FlatShards::plain() const {
  std::vector<torch::Tensor> out;
  for (const Unit& unit : units_) {
    for (const Buffer& b : unit.buffers) {
      if (b.trained && b.params.front().dim() < 2) out.push_back(b.master);
    }
  }
  return out;
}

bool FlatShards::Holds(const torch::Tensor& param) const {
  return held_.count(param.unsafeGetTensorImpl()) > 0;
}

absl::Status FlatShards::StartGather(Unit& unit) {
  if (unit.gathered) return absl::OkStatus();
  for (Buffer& b : unit.buffers) {
    AllocateStorage(b.full, b.full.numel() * b.full.element_size());
    absl::StatusOr<std::function<absl::Status()>> wait =
        group_->StartAllGather(b.full, b.shard.detach());
    if (!wait.ok()) return wait.status();
    unit.pending.push_back(*std::move(wait));
  }
  unit.gathered = true;
  gathered_bytes_ += unit.bytes();
  gathered_peak_ = std::max(gathered_peak_, gathered_bytes_);
  return absl::OkStatus();
}

absl::Status FlatShards::Gather(Unit& unit) {
  if (absl::Status s = StartGather(unit); !s.ok()) return s;
  std::vector<std::function<absl::Status()>> pending = std::exchange(unit.pending, {});
  for (auto& wait : pending) {
    if (absl::Status s = wait(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void FlatShards::Release(Unit& unit) {
  if (zero_stage_ != 3 || !unit.gathered) return;
  // A gather still in flight writes into the buffer: it ends first.
  for (auto& wait : std::exchange(unit.pending, {})) (void)wait();
  for (Buffer& b : unit.buffers) FreeStorage(b.full);
  unit.gathered = false;
  gathered_bytes_ -= unit.bytes();
}

absl::Status FlatShards::Reduce(Unit& unit) {
  torch::NoGradGuard no_grad;
  for (Buffer& b : unit.buffers) {
    if (!b.trained) continue;
    const bool any = std::any_of(b.params.begin(), b.params.end(),
                                 [](const torch::Tensor& p) { return p.grad().defined(); });
    if (!any) continue;
    torch::Tensor flat = torch::zeros({b.full.numel()}, b.master.options().requires_grad(false));
    for (size_t i = 0; i < b.params.size(); ++i) {
      torch::Tensor& p = b.params[i];
      if (!p.grad().defined()) continue;
      const model::FlatEntry& e = b.layout.entries[i];
      flat.narrow(0, e.offset, e.numel()).copy_(p.grad().reshape(-1));
      p.mutable_grad() = torch::Tensor();
    }
    torch::Tensor sum = torch::empty({b.layout.shard_numel}, flat.options());
    if (absl::Status s = group_->ReduceScatterSum(sum, flat); !s.ok()) return s;
    if (b.master.grad().defined()) {
      b.master.mutable_grad().add_(sum);
    } else {
      b.master.mutable_grad() = sum;
    }
  }
  return absl::OkStatus();
}

absl::Status FlatShards::BeginMicro() {
  if (zero_stage_ != 3) return absl::OkStatus();
  return Gather(units_.front());
}

absl::Status FlatShards::EndMicro() {
  for (Unit& unit : units_) {
    if (absl::Status s = Reduce(unit); !s.ok()) return s;
  }
  for (Unit& unit : units_) Release(unit);
  return absl::OkStatus();
}

void FlatShards::ZeroGrad() {
  for (Unit& unit : units_) {
    for (Buffer& b : unit.buffers) {
      b.master.mutable_grad() = torch::Tensor();
      for (torch::Tensor& p : b.params) p.mutable_grad() = torch::Tensor();
    }
  }
}

double GradSquares(const std::vector<torch::Tensor>& params) {
  double sum = 0;
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) sum += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  }
  return sum;
}

double FlatShards::LocalGradSquares() const { return GradSquares(masters()); }

void FlatShards::ScaleGradients(double factor) {
  torch::NoGradGuard no_grad;
  for (Unit& unit : units_) {
    for (Buffer& b : unit.buffers) {
      if (b.master.grad().defined()) b.master.mutable_grad().mul_(factor);
    }
  }
}

absl::Status FlatShards::AfterStep() {
  torch::NoGradGuard no_grad;
  for (Unit& unit : units_) {
    for (Buffer& b : unit.buffers) {
      if (b.master.unsafeGetTensorImpl() != b.shard.unsafeGetTensorImpl()) b.shard.copy_(b.master);
    }
  }
  if (zero_stage_ == 3) return absl::OkStatus();
  for (Unit& unit : units_) {
    unit.gathered = false;
    gathered_bytes_ -= unit.bytes();
    if (absl::Status s = Gather(unit); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status FlatShards::ForEachUnit(
    const std::function<absl::Status(const model::NamedTensors&)>& fn) {
  for (Unit& unit : units_) {
    if (absl::Status s = Gather(unit); !s.ok()) return s;
    model::NamedTensors named;
    for (const Buffer& b : unit.buffers) {
      for (size_t i = 0; i < b.params.size(); ++i) {
        named.emplace_back(b.layout.entries[i].name, b.params[i].detach());
      }
    }
    absl::Status s = fn(named);
    named.clear();
    Release(unit);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

std::vector<model::FlatUnit> FlatShards::layouts() const {
  std::vector<model::FlatUnit> out;
  for (const Unit& unit : units_) {
    for (const Buffer& b : unit.buffers) out.push_back(b.layout);
  }
  return out;
}

std::vector<torch::Tensor> FlatShards::shards() const {
  std::vector<torch::Tensor> out;
  for (const Unit& unit : units_) {
    for (const Buffer& b : unit.buffers) out.push_back(b.shard);
  }
  return out;
}

std::vector<torch::Tensor> FlatShards::masters() const {
  std::vector<torch::Tensor> out;
  for (const Unit& unit : units_) {
    for (const Buffer& b : unit.buffers) out.push_back(b.master);
  }
  return out;
}

absl::Status FlatShards::LoadMasters(const std::vector<torch::Tensor>& values) {
  torch::NoGradGuard no_grad;
  size_t i = 0;
  for (const Unit& unit : units_) {
    for (const Buffer& b : unit.buffers) {
      const torch::Tensor& value = values.at(i++);
      if (!b.trained && !torch::equal(value.to(b.master.scalar_type()), b.master)) {
        return absl::FailedPreconditionError(absl::StrCat(
            worker_id_, ": the frozen tensors of ", b.layout.name,
            " are not the ones this job builds (LoRA trains adapters over an unchanged base)"));
      }
    }
  }
  i = 0;
  for (Unit& unit : units_) {
    for (Buffer& b : unit.buffers) b.master.copy_(values.at(i++));
  }
  return AfterStep();
}

int64_t FlatShards::shard_bytes() const {
  int64_t total = 0;
  for (const Unit& unit : units_) {
    for (const Buffer& b : unit.buffers) total += b.shard.nbytes();
  }
  return total;
}

int64_t FlatShards::master_bytes() const {
  int64_t total = 0;
  for (const Unit& unit : units_) {
    for (const Buffer& b : unit.buffers) {
      if (b.master.unsafeGetTensorImpl() != b.shard.unsafeGetTensorImpl()) {
        total += b.master.nbytes();
      }
    }
  }
  return total;
}

int64_t FlatShards::gradient_bytes() const {
  int64_t total = 0;
  for (const Unit& unit : units_) {
    for (const Buffer& b : unit.buffers) {
      if (b.master.grad().defined()) total += b.master.grad().nbytes();
    }
  }
  return total;
}

int64_t FlatShards::TakeGatheredPeak() {
  return std::exchange(gathered_peak_, gathered_bytes_);
}

void FlatShards::Check(const absl::Status& s, const char* what, int64_t layer) const {
  TORCH_CHECK(s.ok(), worker_id_, ": ", what, " of block ", layer, ": ", s.ToString());
}

void FlatShards::BeforeForward(int64_t layer) {
  if (zero_stage_ != 3) return;
  const auto u = static_cast<size_t>(layer) + 1;
  Check(Gather(units_[u]), "gathering the parameters", layer);
  if (u + 1 < units_.size()) Check(StartGather(units_[u + 1]), "prefetching", layer + 1);
}

void FlatShards::AfterForward(int64_t layer) { Release(units_[static_cast<size_t>(layer) + 1]); }

void FlatShards::BeforeBackward(int64_t layer) {
  if (zero_stage_ != 3) return;
  const auto u = static_cast<size_t>(layer) + 1;
  Check(Gather(units_[u]), "gathering the parameters for backward", layer);
  if (u > 1) Check(StartGather(units_[u - 1]), "prefetching for backward", layer - 1);
}

void FlatShards::AfterBackward(int64_t layer) {
  Unit& unit = units_[static_cast<size_t>(layer) + 1];
  Check(Reduce(unit), "reduce-scattering the gradients", layer);
  Release(unit);
}

}  // namespace trellis::learner::internal
