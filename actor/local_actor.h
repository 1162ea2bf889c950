#ifndef TRELLIS_ACTOR_LOCAL_ACTOR_H_
#define TRELLIS_ACTOR_LOCAL_ACTOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actor/rollout_worker.h"
#include "config/worker_id.h"
#include "ledger/ledger.h"
#include "model/device.h"
#include "text/tokenizer.h"
#include "trellis/v1/job.pb.h"
#include "weightsync/transport.h"

namespace trellis::model {
class SharedBase;  // model/shared_base.h
}  // namespace trellis::model

namespace trellis::actor {

struct LocalActorOptions {
  std::string worker_id = config::WorkerId(v1::ACTOR).ToString();
  // How long SyncWeights waits for the requested version.
  absl::Duration sync_timeout = absl::Seconds(60);
  // LoRA (job.memory.lora with rank > 0): the actor builds the frozen base
  // itself as the learner does (model::NewPolicy with this seed, which must
  // be the learner's, and model.init_checkpoint) and receives only the
  // adapters, refusing them when the learner's base fingerprint differs.
  v1::LoraConfig lora;
  uint64_t seed = 1;
  // Where the model, its KV caches and the sampling compute
  // (model::RoleDevice); the received weights are copied onto it, and the
  // tokens and log-probs come back to the host.
  model::Device device;
  // The rollout engine (actor/internal/engine.h); they change the
  // arithmetic, not the samples. share_prefix: prefill each prompt once for
  // all its responses. continuous_batching: finished rows leave the decode
  // batch and waiting rows join it, at most decode_token_budget rows per
  // decode step (0: no limit; must be >= 0).
  bool share_prefix = true;
  bool continuous_batching = true;
  int64_t decode_token_budget = 0;
  // Keys and values kept across Generate calls (actor/internal/turn_cache.h)
  // for the rows that ended on a stop sequence, at most this many bytes: a
  // later prompt extending such a row's sequence (a multi-turn episode's
  // next turn) prefills only its new tokens, and GenerateResponse's
  // prefill_tokens counts only those. Dropped when the weights change.
  // 0: off. Must be >= 0.
  int64_t turn_cache_bytes = int64_t{1} << 30;
  // GenerateStreaming hands over each prompt's group as soon as its rows
  // have ended (true), or the whole response when the call ends (false).
  // Multi-turn jobs stream groups, so that an episode's environment call
  // overlaps the others' generation. Single-turn embedded jobs do not yet:
  // a verify span that overlaps the actor's call in one process would count
  // the KV cache and workspace the actor reports at the end of the call,
  // whose memory may have been freed before the span began
  // (docs/multi-turn.md, "What is left").
  bool stream_groups = true;
  // deployment.placement colocated (docs/gpu.md): the actor time-shares its
  // device, so between its calls it holds nothing there. After each
  // Generate it releases its turn cache (the KV cache is the call's own)
  // and moves its weights to host memory (model/offload.h); they come back
  // at the next Generate or weight sync. Each move is a ledger record.
  bool colocated = false;
  // LoRA on one base (model/shared_base.h): the base the learner of this
  // process holds; the actor's model reads it instead of a copy of its own
  // where it is the same (not under colocated, whose moves are the actor's
  // own). Null: the actor keeps its own base.
  std::shared_ptr<const model::SharedBase> shared_base;
  // Routing replay (job.grpo.routing_replay, a mixture-of-experts model):
  // each sample carries the experts its positions were routed to
  // (Sample.routing), and the turn cache is not used (its positions were
  // routed by earlier calls).
  bool record_routing = false;
  // deployment.actor.tensor_parallel: K > 1 computes the rollouts on a
  // tensor-parallel group of K ranks (model/tensor_parallel.h), each
  // received weight sliced into them; the samples are those of K = 1
  // (tokens exactly, log-probs within float noise). Must be in [1, 64] and
  // divide n_heads, n_kv_heads and d_ff; not with `colocated`.
  int tensor_parallel = 1;
  // Where each of those K ranks computes (model::RankDevices); empty: all
  // on `device`.
  std::vector<model::Device> rank_devices;
};

// An in-process actor: its own copy of the policy, batched sampling with a
// KV cache, weights received from `receiver`. Records its KV cache in
// `ledger`. The tokenizer, receiver and ledger must outlive the actor.
// The weights start unset: call SyncWeights before Generate. Fails when
// the model cannot be built (under LoRA: its model.init_checkpoint), and
// with InvalidArgument when options.decode_token_budget or
// options.turn_cache_bytes < 0.
[[nodiscard]] absl::StatusOr<std::unique_ptr<RolloutWorker>> NewLocalActor(
    const v1::ModelConfig& model, const text::Tokenizer* tokenizer, weightsync::Receiver* receiver,
    ledger::Ledger* ledger, LocalActorOptions options = {});

}  // namespace trellis::actor

#endif  // TRELLIS_ACTOR_LOCAL_ACTOR_H_
