#ifndef TRELLIS_LEARNER_INTERNAL_SHARDED_CHECKPOINT_H_
#define TRELLIS_LEARNER_INTERNAL_SHARDED_CHECKPOINT_H_

// A checkpoint of a learner group with flat shards (memory.zero_stage 2,
// 3; flat_shards.h): each rank r writes shards.rank<r>.safetensors (its
// fp32 master shard of every buffer, under the buffer's name) beside its
// optimizer file, and rank 0 writes shards.index.json (every buffer's
// layout: model/shard_layout.h). A group of another size restores it by
// cutting each flat tensor's new shard out of the saved ranks' shards
// (reshard on load), reading one saved rank's file at a time.

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/shard_layout.h"

namespace trellis::learner::internal {

// shards.rank<r>.safetensors and shards.index.json in checkpoint `dir`.
std::string ShardsPath(const std::string& dir, int rank);
std::string ShardsIndexPath(const std::string& dir);

// shards.index.json's text: the saved rank count, version and layouts.
std::string ShardsIndexJson(int ranks, int64_t version,
                            const std::vector<model::FlatUnit>& layouts);

// Rank `rank` of `ranks`' tensors from `files`, the files of the saved
// ranks in rank order, each holding that rank's shard of the flat tensors.
// A tensor is flat when `flat` has its name, or its name up to and with its
// last '.' (an optimizer file's "rl/g0.p5." + "exp_avg"), giving the flat
// buffer's length without padding; its new shard (zero-padded) is cut from
// the saved shards. Every other tensor is the first file's. Reads one file
// at a time. FailedPrecondition naming the file and tensor when a shard's
// length does not fit the saved rank count.
absl::StatusOr<std::map<std::string, torch::Tensor>> ReshardFiles(
    const std::vector<std::string>& files, const std::map<std::string, int64_t>& flat, int rank,
    int ranks);

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_SHARDED_CHECKPOINT_H_
