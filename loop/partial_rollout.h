#ifndef TRELLIS_LOOP_PARTIAL_ROLLOUT_H_
#define TRELLIS_LOOP_PARTIAL_ROLLOUT_H_

// Partial rollout (job.async.partial_rollout CONTINUE or REQUEUE,
// docs/async.md): a step's rollout keeps batch + overdraw groups in flight
// and stops once `batch` of them have finished (GenerateRequest.
// finish_prompts); the step trains those. The rest are carried to the next
// step's rollout: a finished group as it is, an unfinished one with its
// responses so far (CONTINUE: they go on from their tokens on the newer
// weights; REQUEUE: they are dropped and the prompt starts afresh). A
// carried group whose oldest token would train more than max_staleness
// versions late starts afresh too, so the staleness bound holds for every
// token. Carried prompts stay in flight in the prompt account; their
// stream positions go into checkpoints (a resumed run starts them afresh).

#include <cstdint>
#include <optional>
#include <vector>

#include "data/dataset.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::loop {

// How many steps the rollout pipeline may run ahead of the learner: under
// CONTINUE one (a rollout overlaps the update before it), so that the rest
// of max_staleness is left to the responses carried over; otherwise
// max_staleness.
int PipelineLead(const v1::AsyncConfig& async);

// A group in flight between two rollouts.
struct CarriedGroup {
  const data::Example* example = nullptr;
  uint64_t position = 0;  // the example's place in the RL prompt stream
  // The formatted prompt; under CONTINUE its `resume` holds the group's
  // responses so far (empty: not begun) and resume_seed their request's.
  v1::Prompt prompt;
};

// What partial rollout did in a round: groups carried to the next one
// (begun or finished beyond the batch), groups started afresh and the
// tokens they had.
struct PartialCounts {
  int64_t groups_carried = 0;
  int64_t groups_restarted = 0;
  int64_t tokens_discarded = 0;

  PartialCounts& operator+=(const PartialCounts& o) {
    groups_carried += o.groups_carried;
    groups_restarted += o.groups_restarted;
    tokens_discarded += o.tokens_discarded;
    return *this;
  }
};

// What a round's response gave the step, and what happened to the rest.
struct PartialSplit {
  std::vector<const data::Example*> examples;  // the step's groups, in request order
  v1::GenerateResponse rollout;                // their samples; the request's counters
  PartialCounts counts;
};

class PartialRollouts {
 public:
  PartialRollouts(v1::AsyncConfig::PartialRollout mode, int64_t batch, double overdraw);

  // New prompts the next round draws: enough for batch + overdraw groups
  // in flight.
  int64_t ToDraw() const;
  // A newly drawn group, or one a resumed checkpoint had in flight.
  void Add(CarriedGroup group);
  // Starts afresh every carried group with a token older than
  // `oldest_version` (the version the next step trains at less
  // max_staleness); returns how many, adding their tokens to *discarded.
  int64_t RestartOlderThan(int64_t oldest_version, int64_t* discarded);
  // The next round's request: the carried groups (oldest first), to finish
  // `batch` of them. REQUIRES: `base` has the round's sampling, group size
  // and seed.
  v1::GenerateRequest Request(const v1::GenerateRequest& base) const;
  // When `batch` carried groups have already finished, the response the
  // actors would give `request` without generating (so none is asked):
  // each group's responses as they stand; nullopt otherwise.
  std::optional<v1::GenerateResponse> Finished(const v1::GenerateRequest& request) const;
  // Takes the step's groups from `response` (to `request`, from Request):
  // the first `batch` finished ones in request order; carries the rest.
  PartialSplit Split(const v1::GenerateRequest& request, const v1::GenerateResponse& response);
  // Ends the groups in flight (the run's last step was taken); returns
  // how many there were.
  int64_t DropAll();
  // The stream positions of the groups in flight, for a checkpoint.
  std::vector<uint64_t> Positions() const;
  int64_t carried() const { return static_cast<int64_t>(carried_.size()); }

 private:
  const v1::AsyncConfig::PartialRollout mode_;
  const int64_t batch_;
  const int64_t overdraw_;
  std::vector<CarriedGroup> carried_;
};

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_PARTIAL_ROLLOUT_H_
