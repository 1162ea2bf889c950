#include "learner/internal/adamw_state.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trellis::learner::internal {
namespace {

std::string ShapeString(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) absl::StrAppend(&s, i ? ", " : "", t.size(i));
  return s + "]";
}

}  // namespace

void AppendAdamWState(torch::optim::AdamW& optimizer, const std::string& prefix,
                      model::NamedTensors* out) {
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t j = 0; j < params.size(); ++j) {
      auto it = optimizer.state().find(params[j].unsafeGetTensorImpl());
      if (it == optimizer.state().end()) continue;
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      const std::string name = absl::StrCat(prefix, "g", g, ".p", j, ".");
      out->emplace_back(name + "step", torch::tensor(s.step(), torch::kInt64));
      out->emplace_back(name + "exp_avg", s.exp_avg().detach().clone());
      out->emplace_back(name + "exp_avg_sq", s.exp_avg_sq().detach().clone());
      if (s.max_exp_avg_sq().defined()) {
        out->emplace_back(name + "max_exp_avg_sq", s.max_exp_avg_sq().detach().clone());
      }
    }
  }
}

absl::Status LoadAdamWState(const std::map<std::string, torch::Tensor>& tensors,
                            const std::string& prefix, const std::string& where,
                            torch::optim::AdamW& optimizer) {
  auto fail = [&](const std::string& name, const std::string& why) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": optimizer tensor ", name, ": ", why));
  };
  // Every entry under the prefix must be consumed by some parameter.
  size_t expected = 0;
  for (const auto& [name, t] : tensors) expected += absl::StartsWith(name, prefix);

  std::vector<std::pair<void*, std::unique_ptr<torch::optim::AdamWParamState>>> states;
  size_t used = 0;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t j = 0; j < params.size(); ++j) {
      const std::string name = absl::StrCat(prefix, "g", g, ".p", j, ".");
      auto step = tensors.find(name + "step");
      if (step == tensors.end()) continue;
      auto state = std::make_unique<torch::optim::AdamWParamState>();
      if (step->second.numel() != 1 || step->second.scalar_type() != torch::kInt64) {
        return fail(step->first, "expected one I64 value");
      }
      state->step(step->second.item<int64_t>());
      ++used;
      for (const char* part : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
        auto it = tensors.find(name + part);
        if (it == tensors.end()) {
          if (std::string(part) == "max_exp_avg_sq") continue;
          return fail(name + part, "missing (its step count is present)");
        }
        const torch::Tensor& param = params[j];
        if (!it->second.sizes().equals(param.sizes()) ||
            it->second.scalar_type() != param.scalar_type()) {
          return fail(it->first, absl::StrCat("shape ", ShapeString(it->second),
                                              " does not match the parameter's ",
                                              ShapeString(param), " (or its dtype differs)"));
        }
        torch::Tensor copy = it->second.to(param.device()).clone();
        if (std::string(part) == "exp_avg") state->exp_avg(copy);
        if (std::string(part) == "exp_avg_sq") state->exp_avg_sq(copy);
        if (std::string(part) == "max_exp_avg_sq") state->max_exp_avg_sq(copy);
        ++used;
      }
      states.emplace_back(params[j].unsafeGetTensorImpl(), std::move(state));
    }
  }
  if (used != expected) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": ", expected - used, " optimizer tensors under \"", prefix,
        "\" match no parameter of the model (a different model or optimizer layout)"));
  }
  optimizer.state().clear();
  for (auto& [key, state] : states) optimizer.state()[key] = std::move(state);
  return absl::OkStatus();
}

}  // namespace trellis::learner::internal
