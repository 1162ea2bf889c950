// The transformer's weights by name: the plain, adapter, base and merged
// views, their dtype, and loading them all or nothing (the layers are in
// transformer.cc and model/internal/block.cc).
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/lora.h"
#include "model/transformer.h"

namespace trellis::model {

std::vector<std::pair<std::string, torch::Tensor>> TransformerImpl::NamedWeights() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

namespace {

std::string ShapeString(const torch::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

// Copies `weights` into `params` (name -> parameter), all or nothing.
absl::Status LoadNamed(
    std::map<std::string, torch::Tensor> params,
    const std::vector<std::pair<std::string, torch::Tensor>>& weights) {
  std::set<std::string> seen;
  for (const auto& [name, tensor] : weights) {
    auto it = params.find(name);
    if (it == params.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("LoadWeights: unknown tensor '", name, "'"));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("LoadWeights: tensor '", name, "' given twice"));
    }
    if (!tensor.defined() || tensor.sizes() != it->second.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LoadWeights: tensor '", name, "' expected shape ", ShapeString(it->second),
          ", got ", tensor.defined() ? ShapeString(tensor) : "undefined"));
    }
    if (!tensor.is_floating_point()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LoadWeights: tensor '", name, "' has non-floating dtype ",
          std::string(c10::toString(tensor.scalar_type()))));
    }
  }
  for (const auto& [name, param] : params) {
    if (seen.count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("LoadWeights: tensor '", name, "' is missing"));
    }
  }
  try {
    torch::NoGradGuard no_grad;
    for (const auto& [name, tensor] : weights) params.at(name).copy_(tensor);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("LoadWeights: copy failed: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace

void TransformerImpl::SetParameterDtype(torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  for (auto& p : parameters()) p.set_data(p.to(dtype));
}

std::vector<std::pair<std::string, torch::Tensor>> TransformerImpl::AdapterWeights() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : named_parameters()) {
    if (IsAdapterName(p.key())) out.emplace_back(p.key(), p.value());
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> TransformerImpl::BaseWeights() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : named_parameters()) {
    if (!IsAdapterName(p.key())) out.emplace_back(p.key(), p.value());
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> TransformerImpl::MergedWeights(
    std::string_view prefix) const {
  const auto included = [prefix](const std::string& name) {
    return std::string_view(name).substr(0, prefix.size()) == prefix;
  };
  std::map<std::string, torch::Tensor> merged;
  for (const auto& m : named_modules()) {
    const auto* linear = dynamic_cast<const LoraLinearImpl*>(m.value().get());
    if (linear != nullptr && linear->has_adapter() && included(m.key())) {
      merged.emplace(m.key() + ".weight", linear->MergedWeight());
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& [name, tensor] : BaseWeights()) {
    if (!included(name)) continue;
    auto it = merged.find(name);
    out.emplace_back(name, it != merged.end() ? it->second : tensor);
  }
  return out;
}

bool TransformerImpl::has_adapters() const {
  for (const auto& p : named_parameters()) {
    if (IsAdapterName(p.key())) return true;
  }
  return false;
}

absl::Status TransformerImpl::LoadWeights(
    const std::vector<std::pair<std::string, torch::Tensor>>& weights) {
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : named_parameters()) params.emplace(p.key(), p.value());
  return LoadNamed(std::move(params), weights);
}

absl::Status TransformerImpl::LoadBaseWeights(
    const std::vector<std::pair<std::string, torch::Tensor>>& weights) {
  const std::vector<std::pair<std::string, torch::Tensor>> base = BaseWeights();
  return LoadNamed(std::map<std::string, torch::Tensor>(base.begin(), base.end()), weights);
}

absl::Status TransformerImpl::LoadAdapterWeights(
    const std::vector<std::pair<std::string, torch::Tensor>>& weights) {
  const std::vector<std::pair<std::string, torch::Tensor>> adapters = AdapterWeights();
  return LoadNamed(std::map<std::string, torch::Tensor>(adapters.begin(), adapters.end()),
                   weights);
}

}  // namespace trellis::model
