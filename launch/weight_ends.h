#ifndef TRELLIS_LAUNCH_WEIGHT_ENDS_H_
#define TRELLIS_LAUNCH_WEIGHT_ENDS_H_

// A launched worker's end of its job's weight sync, from its assignment: a
// learner's publisher or an actor's receiver of the job's transport
// (weightsync/registry.h), or, when the job's sync reshards
// (config::ReshardsWeights), every learner rank's ShardPublisher and each
// actor's SliceReceiver (weightsync/reshard_ends.h).

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trellis/v1/scheduler.pb.h"
#include "weightsync/grpc_transport.h"
#include "weightsync/transport.h"

namespace trellis::launch {

struct WeightEnds {
  std::unique_ptr<weightsync::Publisher> publisher;
  std::unique_ptr<weightsync::Receiver> receiver;
};

// `role`'s end for `assignment`: `host` is the host this worker advertises,
// `transport_port` the port a learner registered (its transport address),
// `weight_stream` the learner's WeightStream host (grpc's publisher). Both
// null for a role or rank that takes no part (a learner rank other than 0
// of a whole-tensor sync; any learner of a recipe without actors).
[[nodiscard]] absl::StatusOr<WeightEnds> MakeWeightEnds(
    const v1::Assignment& assignment, v1::Role role, const std::string& host, int transport_port,
    weightsync::WeightStreamHost* weight_stream);

}  // namespace trellis::launch

#endif  // TRELLIS_LAUNCH_WEIGHT_ENDS_H_
