#ifndef TRELLIS_SCHEDULER_PLACEMENT_H_
#define TRELLIS_SCHEDULER_PLACEMENT_H_

// Placing a job's workers on a cluster's pools: each role's workers go to
// the pool deployment.<role>.pool names, each worker on a node with
// gpus_per_worker free GPUs (pinned to those device ordinals) and a CPU
// core. Roles sharing a pool share its nodes; GPUs are never shared by two
// workers (time-slicing colocated roles on one device is a job setting,
// not a placement). When the cluster cannot hold the job, the error names
// the pool and the shortfall.

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
};

// This host as a one-node pool "local": `gpus` GPUs, `cpus` cores.
v1::ClusterSpec LocalCluster(int gpus, int cpus);

// Every worker of `job` (learner, reference when loop::NeedsReference,
// verifier, actors) placed first-fit, in that order. The job is prepared
// first (loop::PrepareJob): `trellis place` and `trellis launch` refuse an
// invalid job before any process starts. InvalidArgument for a
// spec without pools, a pool without nodes or a duplicate name;
// FailedPrecondition naming the pool and what is short ("pool gpu: the job
// needs 4 GPUs for actor, learner; 2 of 3 free") when it does not fit.
[[nodiscard]] absl::StatusOr<std::vector<WorkerPlacement>> Place(
    const v1::JobConfig& job, const v1::ClusterSpec& cluster);

// The placements as tab-separated lines under a header, one worker a line:
//   id  role  index  pool  node  host  gpus
// gpus: device ordinals joined by ',' ("-" for none). `trellis place` prints
// it; deploy/slurm/trellis.sbatch starts one step per line.
std::string PlacementTable(const std::vector<WorkerPlacement>& placements);

}  // namespace trellis::scheduler

#endif  // TRELLIS_SCHEDULER_PLACEMENT_H_
