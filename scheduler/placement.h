#ifndef TRELLIS_SCHEDULER_PLACEMENT_H_
#define TRELLIS_SCHEDULER_PLACEMENT_H_

// Placing a job's workers on a cluster's pools: each role's workers go to
// the pool deployment.<role>.pool names, each worker on a node with
// gpus_per_worker free GPUs (pinned to those device ordinals) and a CPU
// core. Roles sharing a pool share its nodes. With deployment.placement
// disaggregated (the default) GPUs are never shared by two workers; with
// colocated, the actor, learner and reference time-share them: learner-i,
// reference-i and actor-i are given the same GPUs (a role with more
// workers than the others takes fresh ones for the rest). An actor or
// reference with deployment.<role>.tensor_parallel K > 1 is K ranks per
// worker, each a placement of its own with gpus_per_worker GPUs, the group
// in the role's pool (never straddling pools), on one node where a node
// has room for the whole group, else over the pool's nodes first-fit. A
// learner of deployment.learner.count N is N ranks, one placement each.
// When the cluster cannot hold the job, the error names the pool, each
// role's GPUs (replicas x tensor_parallel x gpus_per_worker) and what the
// pool has.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/worker_id.h"
#include "trellis/v1/cluster.pb.h"
#include "trellis/v1/job.pb.h"

namespace trellis::scheduler {

struct WorkerPlacement {
  config::WorkerId id;
  std::string pool;
  std::string node;
  std::string host;
  std::vector<int> gpus;  // Device ordinals on the node.
  // The worker's rank in its tensor-parallel group of tp_size (1: none).
  int tp_rank = 0;
  int tp_size = 1;
};

// This host as a one-node pool "local": `gpus` GPUs, `cpus` cores.
v1::ClusterSpec LocalCluster(int gpus, int cpus);

// Every worker of `job` (learner, reference when loop::NeedsReference,
// verifier, actors) placed first-fit, in that order. The job is prepared
// first (loop::PrepareJob) and its devices checked
// (config::ValidateLaunchDevices): `trellis place` and `trellis launch`
// refuse an invalid job before any process starts. InvalidArgument for a
// spec without pools, a pool without nodes or a duplicate name;
// FailedPrecondition naming the pool and what is short ("pool 'gpu': the
// job needs 4 GPUs (learner 2: 2 ranks x 1 GPU; actor 2: 1 replica x
// tensor_parallel 2 x 1 GPU), the pool has 3: short by 1") when it does
// not fit.
[[nodiscard]] absl::StatusOr<std::vector<WorkerPlacement>> Place(
    const v1::JobConfig& job, const v1::ClusterSpec& cluster);

// The placements as tab-separated lines under a header, one worker a line:
//   id  role  index  pool  node  host  gpus  tp_rank
// gpus: device ordinals joined by ',' ("-" for none); tp_rank: "r/K" in a
// tensor-parallel group of K, "-" outside one. `trellis place` prints it;
// deploy/slurm/trellis.sbatch starts one step per line.
std::string PlacementTable(const std::vector<WorkerPlacement>& placements);

// The CUDA_VISIBLE_DEVICES a placed worker of `placed` starts with: its
// GPUs' ordinals joined by ',', or "" for a worker without GPUs (it then
// sees none, even on a node that has some). Its CUDA device 0 is its first
// GPU. Rank 0 of a tensor-parallel group, the replica's one process, sees
// the GPUs of every rank of its group on its node after its own, in rank
// order (model/device.h RankDevices).
std::string CudaVisibleDevices(const std::vector<WorkerPlacement>& placed,
                               const WorkerPlacement& placement);

}  // namespace trellis::scheduler

#endif  // TRELLIS_SCHEDULER_PLACEMENT_H_
