#ifndef TRELLIS_LEARNER_INTERNAL_GROUP_COMMON_H_
#define TRELLIS_LEARNER_INTERNAL_GROUP_COMMON_H_

// What the learner's data-parallel groups over Gloo (data_parallel.cc) and
// NCCL (nccl_group.cc) share: the flat buffers they move tensors in, their
// errors' names, their accounting and the scalar sum.

#include <torch/torch.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "learner/internal/data_parallel.h"

namespace trellis::learner::internal {

// Consecutive tensors of one dtype (and, for a broadcast, one owner)
// packed into a flat buffer of at most bucket_bytes (or one larger tensor).
struct Bucket {
  std::vector<torch::Tensor> tensors;
  int owner = 0;
  int64_t bytes = 0;
};

// `owners`: each tensor's owner, or empty (all rank 0's).
std::vector<Bucket> PackBuckets(const std::vector<torch::Tensor>& tensors,
                                const std::vector<int>& owners, int64_t bucket_bytes);

// The bucket's tensors, flattened and concatenated (a new buffer on their
// device).
torch::Tensor Flatten(const Bucket& bucket);

// Copies `buffer` (as Flatten laid it out) back into the bucket's tensors.
void Unflatten(const torch::Tensor& buffer, const Bucket& bucket);

// A group that counts its traffic and its largest buffer.
class MeteredGroup : public DataParallelGroup {
 public:
  Traffic TakeTraffic() override { return std::exchange(traffic_, Traffic{}); }
  int64_t buffer_bytes() const override { return buffer_bytes_; }

 protected:
  // A communication buffer of `bytes` was allocated.
  void Buffered(int64_t bytes) { buffer_bytes_ = std::max(buffer_bytes_, bytes); }
  // `bytes` moved.
  void Moved(int64_t bytes) { traffic_.bytes += bytes; }
  // A call that began at `began` ended now.
  void Took(absl::Time began) { traffic_.seconds += absl::ToDoubleSeconds(absl::Now() - began); }

 private:
  Traffic traffic_;
  int64_t buffer_bytes_ = 0;
};

// `s` (when not OK) with the rank named first: "learner-1 (rank 1 of 2): ".
absl::Status OfRank(const GroupOptions& options, const absl::Status& s);

// InvalidArgument unless a broadcast has one owner per tensor.
absl::Status CheckOwners(const GroupOptions& options, size_t tensors, size_t owners);

// Sums `values` over `group` in place, through one float64 tensor on
// `device` (where the group's tensors live).
absl::Status SumScalars(DataParallelGroup& group, std::vector<double>& values,
                        const torch::Device& device);

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_GROUP_COMMON_H_
