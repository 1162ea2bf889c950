#include "learner/internal/optimizer.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "learner/internal/adamw_state.h"

namespace trellis::learner::internal {
namespace {

bool IsSgd(const v1::OptimizerConfig& config) { return config.name() == v1::OptimizerConfig::SGD; }

}  // namespace

std::unique_ptr<torch::optim::Optimizer> NewOptimizer(const std::vector<torch::Tensor>& params,
                                                      const v1::OptimizerConfig& config) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : params) {
    if (!p.requires_grad()) continue;
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  }
  return NewOptimizer(std::move(decay), std::move(no_decay), config);
}

std::unique_ptr<torch::optim::Optimizer> NewOptimizer(std::vector<torch::Tensor> decay,
                                                      std::vector<torch::Tensor> no_decay,
                                                      const v1::OptimizerConfig& config) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (IsSgd(config)) {
    auto options = [&](double weight_decay) {
      auto o = std::make_unique<torch::optim::SGDOptions>(config.lr());
      o->momentum(config.momentum()).weight_decay(weight_decay);
      return o;
    };
    groups.emplace_back(decay, options(config.weight_decay()));
    groups.emplace_back(no_decay, options(0.0));
    return std::make_unique<torch::optim::SGD>(std::move(groups),
                                               torch::optim::SGDOptions(config.lr()));
  }
  auto options = [&](double weight_decay) {
    auto o = std::make_unique<torch::optim::AdamWOptions>(config.lr());
    o->betas({config.beta1(), config.beta2()}).eps(config.eps()).weight_decay(weight_decay);
    return o;
  };
  groups.emplace_back(decay, options(config.weight_decay()));
  groups.emplace_back(no_decay, options(0.0));
  return std::make_unique<torch::optim::AdamW>(std::move(groups),
                                               torch::optim::AdamWOptions(config.lr()));
}

std::vector<torch::Tensor> OptimizerStateTensors(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> tensors;
  for (const auto& [key, state] : optimizer.state()) {
    if (auto* adam = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) {
      for (const torch::Tensor& t :
           {adam->exp_avg(), adam->exp_avg_sq(), adam->max_exp_avg_sq()}) {
        if (t.defined()) tensors.push_back(t);
      }
    } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
      if (sgd->momentum_buffer().defined()) tensors.push_back(sgd->momentum_buffer());
    }
  }
  return tensors;
}

int64_t OptimizerStateBytes(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const torch::Tensor& t : OptimizerStateTensors(optimizer)) bytes += t.nbytes();
  return bytes;
}

void SetLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

void AppendOptimizerState(torch::optim::Optimizer& optimizer, const v1::OptimizerConfig& config,
                          const std::string& prefix, model::NamedTensors* out) {
  if (!IsSgd(config)) {
    AppendAdamWState(static_cast<torch::optim::AdamW&>(optimizer), prefix, out);
    return;
  }
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t j = 0; j < params.size(); ++j) {
      auto it = optimizer.state().find(params[j].unsafeGetTensorImpl());
      if (it == optimizer.state().end()) continue;
      const auto& s = static_cast<torch::optim::SGDParamState&>(*it->second);
      if (!s.momentum_buffer().defined()) continue;
      out->emplace_back(absl::StrCat(prefix, "g", g, ".p", j, ".momentum_buffer"),
                        s.momentum_buffer().detach().clone());
    }
  }
}

absl::Status LoadOptimizerState(const std::map<std::string, torch::Tensor>& tensors,
                                const v1::OptimizerConfig& config, const std::string& prefix,
                                const std::string& where, torch::optim::Optimizer& optimizer) {
  if (!IsSgd(config)) {
    return LoadAdamWState(tensors, prefix, where, static_cast<torch::optim::AdamW&>(optimizer));
  }
  size_t expected = 0;
  for (const auto& [name, t] : tensors) expected += absl::StartsWith(name, prefix);
  std::vector<std::pair<void*, std::unique_ptr<torch::optim::SGDParamState>>> states;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t j = 0; j < params.size(); ++j) {
      const std::string name = absl::StrCat(prefix, "g", g, ".p", j, ".momentum_buffer");
      auto it = tensors.find(name);
      if (it == tensors.end()) continue;
      const torch::Tensor& param = params[j];
      if (!it->second.sizes().equals(param.sizes()) ||
          it->second.scalar_type() != param.scalar_type()) {
        return absl::FailedPreconditionError(
            absl::StrCat(where, ": optimizer tensor ", name,
                         ": shape or dtype differs from its parameter's"));
      }
      auto state = std::make_unique<torch::optim::SGDParamState>();
      state->momentum_buffer(it->second.to(param.device()).clone());
      states.emplace_back(param.unsafeGetTensorImpl(), std::move(state));
    }
  }
  if (states.size() != expected) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": ", expected - states.size(), " optimizer tensors under \"", prefix,
        "\" match no parameter of the model (a different model or optimizer)"));
  }
  optimizer.state().clear();
  for (auto& [key, state] : states) optimizer.state()[key] = std::move(state);
  return absl::OkStatus();
}

}  // namespace trellis::learner::internal
