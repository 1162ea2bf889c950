#include "learner/internal/group_common.h"

#include "absl/strings/str_cat.h"

namespace trellis::learner::internal {

std::vector<Bucket> PackBuckets(const std::vector<torch::Tensor>& tensors,
                                const std::vector<int>& owners, int64_t bucket_bytes) {
  std::vector<Bucket> buckets;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const torch::Tensor& t = tensors[i];
    const int owner = owners.empty() ? 0 : owners[i];
    const int64_t bytes = static_cast<int64_t>(t.nbytes());
    if (buckets.empty() || buckets.back().owner != owner ||
        buckets.back().tensors.front().scalar_type() != t.scalar_type() ||
        buckets.back().bytes + bytes > bucket_bytes) {
      buckets.push_back(Bucket{{}, owner, 0});
    }
    buckets.back().tensors.push_back(t);
    buckets.back().bytes += bytes;
  }
  return buckets;
}

torch::Tensor Flatten(const Bucket& bucket) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& t : bucket.tensors) flat.push_back(t.detach().reshape(-1));
  return torch::cat(flat);
}

void Unflatten(const torch::Tensor& buffer, const Bucket& bucket) {
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const torch::Tensor& t : bucket.tensors) {
    t.copy_(buffer.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
}

absl::Status OfRank(const GroupOptions& options, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(options.worker_id, " (rank ", options.member.rank,
                                             " of ", options.member.size, "): ", s.message()));
}

absl::Status CheckOwners(const GroupOptions& options, size_t tensors, size_t owners) {
  if (owners == tensors) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(options.worker_id, ": broadcast of ", tensors,
                                                 " tensors with ", owners, " owners"));
}

absl::Status SumScalars(DataParallelGroup& group, std::vector<double>& values,
                        const torch::Device& device) {
  torch::Tensor t = torch::tensor(values, torch::kFloat64).to(device);
  if (absl::Status s = group.AllReduceSum(std::vector<torch::Tensor>{t}); !s.ok()) return s;
  const torch::Tensor sums = t.cpu();
  for (size_t i = 0; i < values.size(); ++i) values[i] = sums[i].item<double>();
  return absl::OkStatus();
}

}  // namespace trellis::learner::internal
