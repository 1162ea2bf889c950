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
#include "env/env.h"
#include "env/run_dir.h"
#include "learner/internal/local_learner.h"
#include "learner/internal/optimizer.h"
#include "learner/internal/phases.h"
#include "learner/internal/sharded_checkpoint.h"
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
  const bool flat = engine_->flat() != nullptr;
  const bool writes_weights = group.rank() == 0;
  // Flat shards hold the policy; beside them, LoRA's adapters.
  if (writes_weights && (!flat || models_->policy()->has_adapters())) {
    if (absl::Status s = SaveNamed(env::CheckpointDir(dir).Weights(),
                                   flat ? models_->policy()->AdapterWeights()
                                        : models_->WithMasters(models_->policy()->NamedWeights()));
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
  if (absl::Status s = model::SaveSafetensors(OptimizerPath(dir, group.rank()), state, meta);
      !s.ok()) {
    return s;
  }
  return flat ? SaveShards(dir) : absl::OkStatus();
}

absl::Status LocalLearner::SaveShards(const std::string& dir) {
  const FlatShards& flat = *engine_->flat();
  const DataParallelGroup& group = engine_->group();
  const std::vector<model::FlatUnit> layouts = flat.layouts();
  const std::vector<torch::Tensor> masters = flat.masters();
  model::NamedTensors shards;
  for (size_t i = 0; i < layouts.size(); ++i) {
    shards.emplace_back(layouts[i].name, masters[i].detach());
  }
  if (group.rank() == 0) {
    if (absl::Status s = env::Env::Default()->WriteFileAtomically(
            ShardsIndexPath(dir), ShardsIndexJson(group.size(), engine_->version(), layouts));
        !s.ok()) {
      return s;
    }
  }
  return model::SaveSafetensors(ShardsPath(dir, group.rank()), shards,
                                {{"policy_version", absl::StrCat(engine_->version())},
                                 {"learner_ranks", absl::StrCat(group.size())}});
}

absl::Status LocalLearner::RestoreShards(const std::string& dir, int saved_ranks,
                                         std::map<std::string, torch::Tensor>* state,
                                         std::vector<torch::Tensor>* masters) {
  FlatShards& flat = *engine_->flat();
  const DataParallelGroup& group = engine_->group();
  const std::vector<model::FlatUnit> layouts = flat.layouts();
  std::map<std::string, int64_t> lengths;
  for (const model::FlatUnit& u : layouts) lengths[u.name] = u.numel;
  std::vector<std::string> shard_files, optimizer_files;
  for (int q = 0; q < saved_ranks; ++q) {
    shard_files.push_back(ShardsPath(dir, q));
    optimizer_files.push_back(OptimizerPath(dir, q));
  }
  const bool same = saved_ranks == group.size();
  absl::StatusOr<std::map<std::string, torch::Tensor>> shards =
      same ? ReshardFiles({ShardsPath(dir, group.rank())}, {}, 0, 1)
           : ReshardFiles(shard_files, lengths, group.rank(), group.size());
  if (!shards.ok()) return shards.status();
  masters->clear();
  for (const model::FlatUnit& u : layouts) {
    auto it = shards->find(u.name);
    if (it == shards->end() || it->second.numel() != u.shard_numel) {
      return absl::FailedPreconditionError(absl::StrCat(
          ShardsPath(dir, group.rank()), ": no shard of ", u.name, " with ", u.shard_numel,
          " elements (a checkpoint of another model)"));
    }
    masters->push_back(it->second);
  }
  if (!same) {
    // Each phase's optimizer names a flat shard's state by its place among
    // the parameters (optimizer.h): the places of this learner's.
    std::map<std::string, int64_t> flat_state;
    for (PhaseId id : CheckpointPhases(*models_)) {
      Phase probe;
      engine_->EnsureOptimizer(probe, id);
      const auto& groups = probe.optimizer->param_groups();
      const std::vector<torch::Tensor> shards_now = flat.masters();
      for (size_t g = 0; g < groups.size(); ++g) {
        for (size_t j = 0; j < groups[g].params().size(); ++j) {
          for (size_t u = 0; u < shards_now.size(); ++u) {
            if (groups[g].params()[j].unsafeGetTensorImpl() !=
                shards_now[u].unsafeGetTensorImpl()) {
              continue;
            }
            flat_state[absl::StrCat(PhaseName(id), "/g", g, ".p", j, ".")] = layouts[u].numel;
          }
        }
      }
    }
    absl::StatusOr<std::map<std::string, torch::Tensor>> resharded =
        ReshardFiles(optimizer_files, flat_state, group.rank(), group.size());
    if (!resharded.ok()) return resharded.status();
    *state = *std::move(resharded);
  }
  return absl::OkStatus();
}

absl::Status LocalLearner::RestoreCheckpoint(const std::string& dir) {
  DataParallelGroup& group = engine_->group();
  const bool has_critic = models_->has_critic();
  const std::string weights_path = env::CheckpointDir(dir).Weights();
  const std::string critic_path = env::CheckpointDir(dir).Critic();
  const bool flat = engine_->flat() != nullptr;
  // Flat shards restore from any rank count: rank 0's file header says
  // which, and another count reads rank 0's file (RestoreShards reshards).
  std::string opt_path = OptimizerPath(dir, group.rank());
  if (flat && group.rank() != 0) {
    const std::string first = OptimizerPath(dir, 0);
    absl::StatusOr<std::unique_ptr<model::SafetensorsReader>> header =
        model::SafetensorsReader::Open(first);
    if (!header.ok()) return header.status();
    absl::StatusOr<int64_t> saved = MetaInt((*header)->metadata(), "learner_ranks", first);
    if (!saved.ok()) return saved.status();
    if (*saved != group.size()) opt_path = first;
  }
  std::map<std::string, std::string> meta;
  absl::StatusOr<model::NamedTensors> opt = model::LoadSafetensors(opt_path, &meta);
  if (!opt.ok()) return opt.status();
  if (meta["format"] != kOptimizerFormat) {
    return absl::FailedPreconditionError(absl::StrCat(opt_path, ": format \"", meta["format"],
                                                      "\", expected \"", kOptimizerFormat, "\""));
  }
  // Checkpoints written before learner groups existed are one rank's.
  int saved_ranks = group.size();
  for (const auto& [key, want] :
       {std::pair<std::string, int64_t>{"learner_ranks", group.size()},
        std::pair<std::string, int64_t>{"zero_stage", job_.memory().zero_stage()}}) {
    if (meta.count(key) == 0) meta[key] = key == "learner_ranks" ? "1" : "0";
    absl::StatusOr<int64_t> saved = MetaInt(meta, key, opt_path);
    if (!saved.ok()) return saved.status();
    if (key == "learner_ranks") saved_ranks = static_cast<int>(*saved);
    if (*saved != want && !(flat && key == "learner_ranks")) {
      return absl::FailedPreconditionError(absl::StrCat(
          opt_path, ": written with ", key, " ", *saved, " but this learner has ", want,
          " (deployment.learner.count and memory.zero_stage must match the checkpoint's)"));
    }
  }
  absl::StatusOr<int64_t> version = MetaInt(meta, "policy_version", opt_path);
  if (!version.ok()) return version.status();
  // Flat shards: the policy is in the shards (read once the optimizers
  // fit), LoRA's adapters in the weights file.
  const bool adapters_only = flat && models_->policy()->has_adapters();
  absl::StatusOr<model::NamedTensors> weights =
      flat && !adapters_only ? model::NamedTensors() : LoadPart(weights_path, *version, opt_path);
  if (!weights.ok()) return weights.status();
  if (!flat) {
    if (absl::Status s = CheckSameBase(*weights, weights_path); !s.ok()) return s;
  }
  std::map<std::string, torch::Tensor> tensors(opt->begin(), opt->end());
  std::vector<torch::Tensor> masters;
  if (flat) {
    if (absl::Status s = RestoreShards(dir, saved_ranks, &tensors, &masters); !s.ok()) return s;
  }
  model::NamedTensors critic_weights;
  if (has_critic) {
    absl::StatusOr<model::NamedTensors> c = LoadPart(critic_path, *version, opt_path);
    if (!c.ok()) return c.status();
    critic_weights = *std::move(c);
  }
  // Build fresh optimizers and fill them (nothing live changes), then load
  // the weights, and swap the optimizers in only when everything loaded.
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
  // Flat shards: the masters last (a frozen base of another job is refused
  // before anything is copied), LoRA's adapters before them.
  absl::Status loaded = adapters_only ? models_->policy()->LoadAdapterWeights(*weights)
                        : flat        ? absl::OkStatus()
                                      : models_->policy()->LoadWeights(*weights);
  if (loaded.ok() && flat) loaded = engine_->flat()->LoadMasters(masters);
  if (!loaded.ok()) {
    if (has_critic) (void)models_->LoadCritic(critic_before);
    return NotThisModel(loaded, flat && !adapters_only ? ShardsIndexPath(dir) : weights_path);
  }
  if (!flat) models_->LoadMasters(models_->TrainedWeights(), *weights);
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
