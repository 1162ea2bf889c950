#include "learner/internal/sharded_checkpoint.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "env/run_dir.h"
#include "model/safetensors.h"

namespace trellis::learner::internal {
namespace {

// The flat length of `name` (by itself or its prefix), or -1.
int64_t FlatLength(const std::map<std::string, int64_t>& flat, const std::string& name) {
  if (auto it = flat.find(name); it != flat.end()) return it->second;
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return -1;
  auto it = flat.find(name.substr(0, dot + 1));
  return it == flat.end() ? -1 : it->second;
}

}  // namespace

std::string ShardsPath(const std::string& dir, int rank) {
  return env::CheckpointDir(dir).File(absl::StrCat("shards.rank", rank, ".safetensors"));
}

std::string ShardsIndexPath(const std::string& dir) {
  return env::CheckpointDir(dir).File(env::CheckpointDir::kShardsIndex);
}

std::string ShardsIndexJson(int ranks, int64_t version,
                            const std::vector<model::FlatUnit>& layouts) {
  std::vector<std::string> units;
  for (const model::FlatUnit& u : layouts) {
    std::vector<std::string> entries;
    for (const model::FlatEntry& e : u.entries) {
      entries.push_back(absl::StrCat("{\"name\": \"", e.name, "\", \"shape\": [",
                                     absl::StrJoin(e.shape, ", "), "], \"offset\": ", e.offset,
                                     "}"));
    }
    units.push_back(absl::StrCat("    {\"name\": \"", u.name, "\", \"dtype\": \"", u.dtype,
                                 "\", \"numel\": ", u.numel, ", \"shard_numel\": ", u.shard_numel,
                                 ",\n     \"entries\": [", absl::StrJoin(entries, ", "), "]}"));
  }
  return absl::StrCat("{\n  \"ranks\": ", ranks, ",\n  \"policy_version\": ", version,
                      ",\n  \"units\": [\n", absl::StrJoin(units, ",\n"), "\n  ]\n}\n");
}

absl::StatusOr<std::map<std::string, torch::Tensor>> ReshardFiles(
    const std::vector<std::string>& files, const std::map<std::string, int64_t>& flat, int rank,
    int ranks) {
  std::map<std::string, torch::Tensor> out;
  const auto saved = static_cast<int64_t>(files.size());
  torch::NoGradGuard no_grad;
  for (int64_t q = 0; q < saved; ++q) {
    absl::StatusOr<model::NamedTensors> tensors = model::LoadSafetensors(files[q]);
    if (!tensors.ok()) return tensors.status();
    for (auto& [name, t] : *tensors) {
      const int64_t length = t.dim() == 1 ? FlatLength(flat, name) : -1;
      if (length < 0) {
        if (q == 0) out[name] = std::move(t);
        continue;
      }
      const int64_t old_shard = std::max<int64_t>(1, (length + saved - 1) / saved);
      if (t.numel() != old_shard) {
        return absl::FailedPreconditionError(absl::StrCat(
            files[q], ": tensor ", name, " holds ", t.numel(), " elements; a shard of ", length,
            " over ", saved, " ranks holds ", old_shard, " (a checkpoint of another model)"));
      }
      const int64_t shard = std::max<int64_t>(1, (length + ranks - 1) / ranks);
      torch::Tensor& mine = out[name];
      if (!mine.defined()) mine = torch::zeros({shard}, t.options());
      // This rank's range, what saved rank q held, and the real elements.
      const int64_t first = std::max({rank * shard, q * old_shard});
      const int64_t last = std::min({rank * shard + shard, q * old_shard + old_shard, length});
      if (first >= last) continue;
      mine.narrow(0, first - rank * shard, last - first)
          .copy_(t.narrow(0, first - q * old_shard, last - first));
    }
  }
  return out;
}

}  // namespace trellis::learner::internal
