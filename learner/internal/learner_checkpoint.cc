// The local learner's checkpoints (learner/internal/local_learner.h):
// weights, the critic, every phase's optimizer state and step count. Of a
// learner group, rank 0 writes the weights and the critic and every rank
// its own optimizer file: optimizer.safetensors (rank 0) and
// optimizer.rank<r>.safetensors (rank r > 0), each naming the group's size
// and ZeRO stage, which a restore must match.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "config/choice.h"
#include "env/run_dir.h"
#include "learner/internal/local_learner.h"
#include "learner/internal/optimizer.h"
#include "learner/internal/phases.h"
#include "model/lora.h"
#include "weightsync/fingerprint.h"

namespace trellis::learner::internal {
namespace {

// Format of optimizer.safetensors; a checkpoint with another is refused.
constexpr char kOptimizerFormat[] = "trellis.adamw.v1";

// This rank's optimizer file in checkpoint `dir`.
std::string OptimizerPath(const std::string& dir, int rank) {
  return env::CheckpointDir(dir).Optimizer(rank);
}

// An integer field of a safetensors file's metadata.
absl::StatusOr<int64_t> MetaInt(const std::map<std::string, std::string>& meta,
                                const std::string& key, const std::string& path) {
  auto it = meta.find(key);
  int64_t value = 0;
  if (it == meta.end() || !absl::SimpleAtoi(it->second, &value)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": metadata field ", key, ": expected an integer, found ",
                     it == meta.end() ? "nothing" : "\"" + it->second + "\""));
  }
  return value;
}

// The tensors of a checkpoint's weights file, whose policy_version must be
// `version` (that of `opt_path`, the optimizer file).
absl::StatusOr<model::NamedTensors> LoadPart(const std::string& path, int64_t version,
                                             const std::string& opt_path) {
  std::map<std::string, std::string> meta;
  absl::StatusOr<model::NamedTensors> tensors = model::LoadSafetensors(path, &meta);
  if (!tensors.ok()) return tensors.status();
  absl::StatusOr<int64_t> part_version = MetaInt(meta, "policy_version", path);
  if (!part_version.ok()) return part_version.status();
  if (*part_version != version) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": policy_version ", *part_version,
                                                      " but ", opt_path, " has ", version,
                                                      " (files from different checkpoints)"));
  }
  return tensors;
}

model::NamedTensors Snapshot(const model::NamedTensors& weights) {
  model::NamedTensors out;
  for (const auto& [name, tensor] : weights) out.emplace_back(name, tensor.detach().clone());
  return out;
}

// A well-formed file that does not fit this model: a checkpoint of another
// job, not bad input to this call.
absl::Status NotThisModel(const absl::Status& s, const std::string& path) {
  const absl::StatusCode code = s.code() == absl::StatusCode::kInvalidArgument
                                    ? absl::StatusCode::kFailedPrecondition
                                    : s.code();
  return absl::Status(code, absl::StrCat(path, ": ", s.message()));
}

}  // namespace

absl::Status LocalLearner::SaveNamed(const std::string& path, const model::NamedTensors& named) {
  model::NamedTensors weights;
  for (const auto& [name, tensor] : named) weights.emplace_back(name, tensor.detach());
  return model::SaveSafetensors(path, weights,
                                {{"policy_version", absl::StrCat(engine_->version())}});
}

absl::Status LocalLearner::SaveCheckpoint(const std::string& dir) {
  DataParallelGroup& group = engine_->group();
  const bool writes_weights = group.rank() == 0;
  if (writes_weights) {
    if (absl::Status s = SaveNamed(env::CheckpointDir(dir).Weights(),
                                   models_->WithMasters(models_->policy()->NamedWeights()));
        !s.ok()) {
      return s;
    }
  }
  if (writes_weights && models_->has_critic()) {
    if (absl::Status s = SaveNamed(env::CheckpointDir(dir).Critic(),
                                   models_->WithMasters(models_->CriticWeights()));
        !s.ok()) {
      return s;
    }
  }
  model::NamedTensors state;
  std::map<std::string, std::string> meta = {
      {"format", kOptimizerFormat},
      {"policy_version", absl::StrCat(engine_->version())},
      {"learner_ranks", absl::StrCat(group.size())},
      {"zero_stage", absl::StrCat(job_.memory().zero_stage())}};
  try {
    for (PhaseId id : CheckpointPhases(*models_)) {
      const std::string name(PhaseName(id));
      const Phase& phase = engine_->phase(id);
      meta[name + "_steps"] = absl::StrCat(phase.steps);
      meta[name + "_optimizer"] = phase.optimizer ? "1" : "0";
      meta[name + "_rule"] = config::ChoiceName(PhaseOptimizer(job_, id).name());
      if (phase.optimizer) {
        AppendOptimizerState(*phase.optimizer, PhaseOptimizer(job_, id), name + "/", &state);
      }
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(
        options_.worker_id, ": gathering optimizer state: ", e.what_without_backtrace()));
  }
  return model::SaveSafetensors(OptimizerPath(dir, group.rank()), state, meta);
}

absl::Status LocalLearner::RestoreCheckpoint(const std::string& dir) {
  DataParallelGroup& group = engine_->group();
  const bool has_critic = models_->has_critic();
  const std::string weights_path = env::CheckpointDir(dir).Weights();
  const std::string critic_path = env::CheckpointDir(dir).Critic();
  const std::string opt_path = OptimizerPath(dir, group.rank());
  std::map<std::string, std::string> meta;
  absl::StatusOr<model::NamedTensors> opt = model::LoadSafetensors(opt_path, &meta);
  if (!opt.ok()) return opt.status();
  if (meta["format"] != kOptimizerFormat) {
    return absl::FailedPreconditionError(absl::StrCat(opt_path, ": format \"", meta["format"],
                                                      "\", expected \"", kOptimizerFormat, "\""));
  }
  // Checkpoints written before learner groups existed are one rank's.
  for (const auto& [key, want] :
       {std::pair<std::string, int64_t>{"learner_ranks", group.size()},
        std::pair<std::string, int64_t>{"zero_stage", job_.memory().zero_stage()}}) {
    if (meta.count(key) == 0) meta[key] = key == "learner_ranks" ? "1" : "0";
    absl::StatusOr<int64_t> saved = MetaInt(meta, key, opt_path);
    if (!saved.ok()) return saved.status();
    if (*saved != want) {
      return absl::FailedPreconditionError(absl::StrCat(
          opt_path, ": written with ", key, " ", *saved, " but this learner has ", want,
          " (deployment.learner.count and memory.zero_stage must match the checkpoint's)"));
    }
  }
  absl::StatusOr<int64_t> version = MetaInt(meta, "policy_version", opt_path);
  if (!version.ok()) return version.status();
  absl::StatusOr<model::NamedTensors> weights = LoadPart(weights_path, *version, opt_path);
  if (!weights.ok()) return weights.status();
  if (absl::Status s = CheckSameBase(*weights, weights_path); !s.ok()) return s;
  model::NamedTensors critic_weights;
  if (has_critic) {
    absl::StatusOr<model::NamedTensors> c = LoadPart(critic_path, *version, opt_path);
    if (!c.ok()) return c.status();
    critic_weights = *std::move(c);
  }
  // Build fresh optimizers and fill them (nothing live changes), then load
  // the weights, and swap the optimizers in only when everything loaded.
  std::map<std::string, torch::Tensor> tensors(opt->begin(), opt->end());
  std::vector<std::pair<Phase, PhaseId>> fresh;
  for (PhaseId id : CheckpointPhases(*models_)) {
    const std::string name(PhaseName(id));
    const v1::OptimizerConfig& config = PhaseOptimizer(job_, id);
    Phase restored;
    absl::StatusOr<int64_t> steps = MetaInt(meta, name + "_steps", opt_path);
    if (!steps.ok()) return steps.status();
    absl::StatusOr<int64_t> present = MetaInt(meta, name + "_optimizer", opt_path);
    if (!present.ok()) return present.status();
    restored.steps = *steps;
    // Checkpoints written before OptimizerConfig.name existed are AdamW's.
    const auto rule = meta.find(name + "_rule");
    const std::string saved_rule =
        rule == meta.end() ? trellis::config::ChoiceName(v1::OptimizerConfig::ADAMW) : rule->second;
    if (*present != 0 &&
        trellis::config::ParseChoice<v1::OptimizerConfig::Rule>(saved_rule) != config.name()) {
      return absl::FailedPreconditionError(absl::StrCat(
          opt_path, ": the ", name, " optimizer was saved as \"", saved_rule,
          "\" but the job's is \"", trellis::config::ChoiceName(config.name()), "\""));
    }
    if (*present != 0) {
      try {
        engine_->EnsureOptimizer(restored, id);
        if (absl::Status s =
                LoadOptimizerState(tensors, config, name + "/", opt_path, *restored.optimizer);
            !s.ok()) {
          return s;
        }
      } catch (const c10::Error& e) {
        return absl::InternalError(absl::StrCat(opt_path, ": restoring the ", name,
                                                " optimizer: ", e.what_without_backtrace()));
      }
    }
    fresh.emplace_back(std::move(restored), id);
  }
  // Each LoadWeights checks everything before it copies; a policy that does
  // not fit puts the critic back as it was.
  const model::NamedTensors critic_before =
      has_critic ? Snapshot(models_->CriticWeights()) : model::NamedTensors();
  if (has_critic) {
    if (absl::Status s = models_->LoadCritic(critic_weights); !s.ok()) {
      return NotThisModel(s, critic_path);
    }
  }
  if (absl::Status s = models_->policy()->LoadWeights(*weights); !s.ok()) {
    if (has_critic) (void)models_->LoadCritic(critic_before);
    return NotThisModel(s, weights_path);
  }
  models_->LoadMasters(models_->TrainedWeights(), *weights);
  if (has_critic) models_->LoadMasters(models_->CriticWeights(), critic_weights);
  for (auto& [restored, id] : fresh) engine_->phase(id) = std::move(restored);
  engine_->set_version(*version);
  return absl::OkStatus();
}

absl::Status LocalLearner::CheckSameBase(const model::NamedTensors& weights,
                                         const std::string& path) const {
  if (!models_->policy()->has_adapters()) return absl::OkStatus();
  model::NamedTensors base;
  for (const auto& [name, tensor] : weights) {
    if (!model::IsAdapterName(name)) base.emplace_back(name, tensor);
  }
  if (weightsync::Fingerprint(base) == models_->base_fingerprint()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(path,
                   ": its frozen base is not the one this job builds (runtime.seed, "
                   "model.init_checkpoint); LoRA trains adapters over an unchanged base"));
}

}  // namespace trellis::learner::internal
