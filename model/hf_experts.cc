#include "model/hf_experts.h"

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/hf_config.h"
#include "model/safetensors.h"

namespace trellis::model {
namespace {

constexpr char kGateUp[] = "experts.gate_up_proj";
constexpr char kDown[] = "experts.down_proj";

// One expert's matrix in a stacked tensor.
enum class ExpertPart { kGate, kUp, kDown };

// The projection names of each family's per-expert layout.
struct ExpertNames {
  absl::string_view module;  // the MLP's module in the layer
  absl::string_view gate, up, down;
};
constexpr ExpertNames kQwenNames{"mlp", "gate_proj", "up_proj", "down_proj"};
constexpr ExpertNames kMixtralNames{"block_sparse_moe", "w1", "w3", "w2"};

// Where a checkpoint tensor goes: `parameter` whole (expert < 0) or one
// expert's part of it.
struct Place {
  std::string parameter;
  int64_t expert = -1;
  ExpertPart part = ExpertPart::kGate;

  // The key a place is filled under; a whole parameter's is its name.
  std::string Key() const {
    if (expert < 0) return parameter;
    static constexpr const char* kParts[] = {"gate", "up", "down"};
    return absl::StrCat(parameter, "[", expert, "].", kParts[static_cast<int>(part)]);
  }
};

// The place of checkpoint tensor `name`: a per-expert matrix of either
// family's layout, Mixtral's router, or else the parameter of that name.
Place PlaceOf(const std::string& name) {
  const std::vector<std::string> p = absl::StrSplit(name, '.');
  const bool layer = p.size() >= 6 && p[0] == "model" && p[1] == "layers" && p.back() == "weight";
  const std::string prefix = layer ? absl::StrCat("model.layers.", p[2], ".mlp.") : "";
  if (layer && p.size() == 6 && p[3] == kMixtralNames.module && p[4] == "gate") {
    return {prefix + "gate.weight"};
  }
  int64_t expert = -1;
  if (!layer || p.size() != 8 || p[4] != "experts" || !absl::SimpleAtoi(p[5], &expert) ||
      expert < 0) {
    return {name};
  }
  for (const ExpertNames& n : {kQwenNames, kMixtralNames}) {
    if (p[3] != n.module) continue;
    if (p[6] == n.gate) return {prefix + kGateUp, expert, ExpertPart::kGate};
    if (p[6] == n.up) return {prefix + kGateUp, expert, ExpertPart::kUp};
    if (p[6] == n.down) return {prefix + kDown, expert, ExpertPart::kDown};
  }
  return {name};
}

// The rows of `stacked` (a gate_up_proj or down_proj) that `part` of
// `expert` occupies.
torch::Tensor ExpertView(const torch::Tensor& stacked, int64_t expert, ExpertPart part) {
  const torch::Tensor matrix = stacked[expert];
  if (part == ExpertPart::kDown) return matrix;
  const int64_t width = matrix.size(0) / 2;
  return matrix.narrow(0, part == ExpertPart::kGate ? 0 : width, width);
}

bool IsStackedExperts(const std::string& name) {
  return absl::EndsWith(name, kGateUp) || absl::EndsWith(name, kDown);
}

std::string ShapeText(c10::IntArrayRef shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

HfWeightMap::HfWeightMap(std::map<std::string, torch::Tensor> parameters)
    : parameters_(std::move(parameters)) {}

absl::StatusOr<torch::Tensor> HfWeightMap::Target(const std::string& name, c10::IntArrayRef shape) {
  const Place place = PlaceOf(name);
  auto it = parameters_.find(place.parameter);
  if (it == parameters_.end() || (place.expert >= 0 && (!IsStackedExperts(place.parameter) ||
                                                        place.expert >= it->second.size(0)))) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tensor '", name, "' (no parameter of the model)"));
  }
  // A whole stacked tensor and its experts' matrices fill the same place.
  const std::string key = place.Key();
  auto taken = filled_.find(place.parameter);
  if (taken == filled_.end()) taken = filled_.find(key);
  if (taken == filled_.end() && place.expert < 0) {
    taken = filled_.lower_bound(place.parameter + "[");
    if (taken != filled_.end() && !absl::StartsWith(taken->first, place.parameter + "[")) {
      taken = filled_.end();
    }
  }
  if (taken != filled_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' given twice (with '", taken->second, "')"));
  }
  const torch::Tensor target =
      place.expert < 0 ? it->second : ExpertView(it->second, place.expert, place.part);
  if (target.sizes() != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' expected shape ",
                                                   ShapeText(target.sizes()), ", got ",
                                                   ShapeText(shape)));
  }
  filled_.emplace(key, name);
  return target;
}

absl::Status HfWeightMap::CheckComplete() const {
  for (const auto& [name, parameter] : parameters_) {
    if (filled_.count(name) > 0) continue;
    if (!IsStackedExperts(name)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is missing"));
    }
    const bool down = absl::EndsWith(name, kDown);
    for (int64_t e = 0; e < parameter.size(0); ++e) {
      for (ExpertPart part : down ? std::vector<ExpertPart>{ExpertPart::kDown}
                                  : std::vector<ExpertPart>{ExpertPart::kGate, ExpertPart::kUp}) {
        const Place place{name, e, part};
        if (filled_.count(place.Key()) == 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("tensor '", place.Key(), "' (an expert's matrix) is missing"));
        }
      }
    }
  }
  return absl::OkStatus();
}

NamedTensors ReleasedExpertLayout(const NamedTensors& weights, HfArchitecture architecture) {
  const ExpertNames& n = architecture == HfArchitecture::kMixtral ? kMixtralNames : kQwenNames;
  NamedTensors out;
  for (const auto& [name, tensor] : weights) {
    const std::vector<std::string> p = absl::StrSplit(name, '.');
    const bool layer = p.size() >= 5 && p[0] == "model" && p[1] == "layers" && p[3] == "mlp";
    const std::string module = layer ? absl::StrCat("model.layers.", p[2], ".", n.module) : "";
    if (layer && name == absl::StrCat("model.layers.", p[2], ".mlp.gate.weight")) {
      out.emplace_back(module + ".gate.weight", tensor);
    } else if (layer && IsStackedExperts(name)) {
      const bool down = absl::EndsWith(name, kDown);
      for (int64_t e = 0; e < tensor.size(0); ++e) {
        const std::string expert = absl::StrCat(module, ".experts.", e, ".");
        if (down) {
          out.emplace_back(absl::StrCat(expert, n.down, ".weight"), tensor[e]);
          continue;
        }
        out.emplace_back(absl::StrCat(expert, n.gate, ".weight"),
                         ExpertView(tensor, e, ExpertPart::kGate));
        out.emplace_back(absl::StrCat(expert, n.up, ".weight"),
                         ExpertView(tensor, e, ExpertPart::kUp));
      }
    } else {
      out.emplace_back(name, tensor);
    }
  }
  return out;
}

}  // namespace trellis::model
