#ifndef TRELLIS_SCHEDULER_LEARNER_GROUP_H_
#define TRELLIS_SCHEDULER_LEARNER_GROUP_H_

// The learner ranks of a data-parallel group (deployment.learner.count > 1,
// memory.zero_stage) as the one LearnerWorker the loop drives. Every rank
// takes every update and checkpoint call, concurrently (they meet in the
// group's collectives); the answer is rank 0's, whose stats cover the whole
// batch. Weights are published and saved by rank 0, and evaluation runs on
// rank 0 alone (its weights are every rank's), unless the ranks hold their
// weights as flat shards (memory.zero_stage 2, 3): then every rank takes
// those calls too, gathering the weights together.

#include <memory>
#include <vector>

#include "learner/learner_worker.h"

namespace trellis::scheduler {

// REQUIRES: `ranks` non-empty, in rank order. `sharded`: the ranks hold
// flat shards.
std::unique_ptr<learner::LearnerWorker> NewLearnerGroup(
    std::vector<std::unique_ptr<learner::LearnerWorker>> ranks, bool sharded = false);

}  // namespace trellis::scheduler

#endif  // TRELLIS_SCHEDULER_LEARNER_GROUP_H_
