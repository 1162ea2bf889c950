#include "ledger/kinds.h"

namespace trellis::ledger {

std::string_view StageName(Stage stage) {
  switch (stage) {
    case Stage::kLoad: return "load";
    case Stage::kSft: return "sft";
    case Stage::kRollout: return "rollout";
    case Stage::kVerify: return "verify";
    case Stage::kReference: return "reference";
    case Stage::kAdvantage: return "advantage";
    case Stage::kUpdate: return "update";
    case Stage::kWeightSync: return "weight_sync";
    case Stage::kEval: return "eval";
    case Stage::kCheckpoint: return "checkpoint";
    case Stage::kReward: return "reward";
    case Stage::kReferenceCache: return "reference_cache";
    case Stage::kEnvironment: return "environment";
  }
  return "unknown";
}

std::string_view ObjectName(Object object) {
  switch (object) {
    case Object::kParameters: return "parameters";
    case Object::kGradients: return "gradients";
    case Object::kOptimizerState: return "optimizer_state";
    case Object::kActivations: return "activations";
    case Object::kKvCache: return "kv_cache";
    case Object::kReferenceModel: return "reference_model";
    case Object::kRolloutBuffer: return "rollout_buffer";
    case Object::kCritic: return "critic";
    case Object::kRewardModel: return "reward_model";
    case Object::kCommunication: return "communication";
    case Object::kWorkspace: return "workspace";
    case Object::kMasterWeights: return "master_weights";
    case Object::kAdapters: return "adapters";
    case Object::kGatheredParameters: return "gathered_parameters";
  }
  return "unknown";
}

std::optional<Stage> StageFromName(std::string_view name) {
  for (int s = 0; s < kNumStages; ++s) {
    if (StageName(static_cast<Stage>(s)) == name) return static_cast<Stage>(s);
  }
  return std::nullopt;
}

std::optional<Object> ObjectFromName(std::string_view name) {
  for (int o = 0; o < kNumObjects; ++o) {
    if (ObjectName(static_cast<Object>(o)) == name) return static_cast<Object>(o);
  }
  return std::nullopt;
}

std::string_view MoveDirectionName(MoveDirection direction) {
  return direction == MoveDirection::kOut ? "out" : "in";
}

std::optional<MoveDirection> MoveDirectionFromName(std::string_view name) {
  for (MoveDirection d : {MoveDirection::kOut, MoveDirection::kIn}) {
    if (MoveDirectionName(d) == name) return d;
  }
  return std::nullopt;
}

}  // namespace trellis::ledger
