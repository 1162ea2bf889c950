#include "learner/internal/learner_models.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "config/recipe.h"
#include "model/policy.h"
#include "weightsync/fingerprint.h"

namespace trellis::learner::internal {
namespace {

// job.memory.precision, read here only.
bool Bf16(const v1::MemoryConfig& memory) { return memory.precision() == v1::MemoryConfig::BF16; }

// job.ppo.critic, read here only: a value head on the policy's trunk in
// place of a separate critic model.
bool SharedCritic(const v1::PpoConfig& ppo) { return ppo.critic() == v1::PpoConfig::SHARED; }

}  // namespace

LearnerModels::LearnerModels(const v1::JobConfig& job, model::Transformer policy)
    : bf16_(Bf16(job.memory())), d_model_(job.model().d_model()), policy_(std::move(policy)) {}

absl::StatusOr<std::unique_ptr<LearnerModels>> LearnerModels::Build(const v1::JobConfig& job,
                                                                    int64_t vocab_size,
                                                                    uint64_t seed,
                                                                    const std::string& worker_id,
                                                                    const torch::Device& device) {
  // A reward-model job trains a scalar-head model in the policy's place
  // (config refuses LoRA for it).
  const bool reward_model = config::RecipeOf(job) == config::Recipe::kRewardModel;
  // The critic draws on from the policy's seeded stream.
  const std::unique_lock<std::recursive_mutex> draws = model::LockInitialDraws();
  absl::StatusOr<model::Transformer> policy =
      model::NewPolicy(job.model(), job.memory().lora(), vocab_size, seed,
                       reward_model ? model::Head::kScalar : model::Head::kLanguageModel);
  if (!policy.ok()) {
    return absl::Status(policy.status().code(),
                        absl::StrCat(worker_id, ": ", policy.status().message()));
  }
  std::unique_ptr<LearnerModels> models(new LearnerModels(job, *std::move(policy)));
  model::Transformer& p = models->policy_;
  if (p->has_adapters()) models->base_fingerprint_ = weightsync::Fingerprint(p->BaseWeights());
  try {
    p->train();
    if (config::RecipeOf(job) == config::Recipe::kPpo) {
      models->BuildCritic(job, vocab_size);
    }
    models->MoveTo(device);
    models->ApplyMemory(job.memory());
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(worker_id, ": building the model: ", e.what_without_backtrace()));
  }
  return models;
}

void LearnerModels::BuildCritic(const v1::JobConfig& job, int64_t vocab_size) {
  if (SharedCritic(job.ppo())) {
    value_head_ = torch::nn::Linear(torch::nn::LinearOptions(d_model_, 1).bias(false));
    torch::NoGradGuard no_grad;
    value_head_->weight.normal_(0.0, job.model().init_std());
  } else {
    critic_ = model::Transformer(job.model(), vocab_size, model::Head::kScalar);
    critic_->train();
  }
}

void LearnerModels::MoveTo(const torch::Device& device) {
  policy_->to(device);
  if (!critic_.is_empty()) critic_->to(device);
  if (value_head_) value_head_->to(device);
}

// With bf16 the fp32 masters are taken from the weights before the models
// are rounded (a tensor keeps its identity through the cast, so the
// optimizers find them).
void LearnerModels::ApplyMemory(const v1::MemoryConfig& memory) {
  std::vector<torch::Tensor> trained = policy_->parameters();
  if (!critic_.is_empty()) {
    for (const torch::Tensor& p : critic_->parameters()) trained.push_back(p);
  }
  if (value_head_) trained.push_back(value_head_->weight);
  for (const torch::Tensor& p : trained) {
    if (bf16_ && p.requires_grad()) masters_.For(p);
  }
  for (model::Transformer* m : {&policy_, &critic_}) {
    if (m->is_empty()) continue;
    (*m)->ApplyMemoryConfig(memory);
  }
  if (bf16_ && value_head_) value_head_->weight.set_data(value_head_->weight.to(torch::kBFloat16));
}

model::NamedTensors LearnerModels::TrainedWeights() const {
  return policy_->has_adapters() ? policy_->AdapterWeights() : policy_->NamedWeights();
}

std::vector<torch::Tensor> LearnerModels::TrainedParams() const {
  std::vector<torch::Tensor> params;
  for (const auto& [name, tensor] : TrainedWeights()) params.push_back(tensor);
  return params;
}

model::NamedTensors LearnerModels::CriticWeights() const {
  if (!critic_.is_empty()) return critic_->NamedWeights();
  return {{"value_head.weight", value_head_->weight}};
}

absl::Status LearnerModels::LoadCritic(const model::NamedTensors& weights) {
  if (!critic_.is_empty()) return critic_->LoadWeights(weights);
  if (weights.size() != 1 || weights[0].first != "value_head.weight" ||
      weights[0].second.sizes() != value_head_->weight.sizes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected one tensor value_head.weight of shape [1, ", d_model_, "]"));
  }
  torch::NoGradGuard no_grad;
  value_head_->weight.copy_(weights[0].second);
  return absl::OkStatus();
}

model::NamedTensors LearnerModels::WithMasters(model::NamedTensors live) const {
  for (auto& [name, tensor] : live) {
    if (torch::Tensor master = masters_.Find(tensor); master.defined()) tensor = master;
  }
  return live;
}

void LearnerModels::LoadMasters(const model::NamedTensors& live,
                                const model::NamedTensors& loaded) {
  if (!bf16_) return;
  std::map<std::string, torch::Tensor> by_name(loaded.begin(), loaded.end());
  for (const auto& [name, tensor] : live) masters_.Load(tensor, by_name.at(name));
}

double LearnerModels::RecomputeSeconds() const {
  return policy_->recompute_seconds() + (critic_.is_empty() ? 0 : critic_->recompute_seconds());
}

}  // namespace trellis::learner::internal
