#include "scheduler/placement.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/job_config.h"
#include "loop/recipe.h"

namespace trellis::scheduler {
namespace {

struct NodeState {
  const v1::Node* node = nullptr;
  std::vector<int> free_gpus;
};

struct RoleDemand {
  v1::Role role;
  const v1::RoleDeployment* deployment = nullptr;
  int count = 0;
};

absl::Status CheckCluster(const v1::ClusterSpec& cluster) {
  if (cluster.pools().empty()) return absl::InvalidArgumentError("cluster: no pools");
  std::set<std::string> pools, nodes;
  for (int p = 0; p < cluster.pools_size(); ++p) {
    const v1::Pool& pool = cluster.pools(p);
    const std::string path = absl::StrCat("pools[", p, "]");
    if (pool.name().empty()) return absl::InvalidArgumentError(path + ".name: required");
    if (!pools.insert(pool.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".name: pool '", pool.name(), "' named twice"));
    }
    if (pool.nodes().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".nodes: pool '", pool.name(), "' has no nodes"));
    }
    for (int n = 0; n < pool.nodes_size(); ++n) {
      const v1::Node& node = pool.nodes(n);
      const std::string npath = absl::StrCat(path, ".nodes[", n, "]");
      if (node.name().empty()) return absl::InvalidArgumentError(npath + ".name: required");
      if (!nodes.insert(node.name()).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(npath, ".name: node '", node.name(), "' named twice"));
      }
      if (node.gpus() < 0 || node.cpus() < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(npath, ": gpus must be >= 0 and cpus >= 1, found gpus ", node.gpus(),
                         ", cpus ", node.cpus()));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

v1::ClusterSpec LocalCluster(int gpus, int cpus) {
  v1::ClusterSpec cluster;
  v1::Node* node = cluster.add_pools()->add_nodes();
  cluster.mutable_pools(0)->set_name("local");
  node->set_name("localhost");
  node->set_host("127.0.0.1");
  node->set_gpus(gpus);
  node->set_cpus(std::max(1, cpus));
  return cluster;
}

absl::StatusOr<std::vector<WorkerPlacement>> Place(const v1::JobConfig& job,
                                                   const v1::ClusterSpec& cluster) {
  if (absl::Status s = CheckCluster(cluster); !s.ok()) return s;
  v1::JobConfig prepared = job;
  if (absl::Status s = loop::PrepareJob(&prepared); !s.ok()) return s;
  std::map<std::string, std::vector<NodeState>> pools;
  for (const v1::Pool& pool : cluster.pools()) {
    for (const v1::Node& node : pool.nodes()) {
      NodeState state;
      state.node = &node;
      for (int g = 0; g < node.gpus(); ++g) state.free_gpus.push_back(g);
      pools[pool.name()].push_back(state);
    }
  }
  const v1::DeploymentConfig& d = job.deployment();
  const std::vector<RoleDemand> demands = {
      {v1::LEARNER, &d.learner(), loop::WorkersNeeded(job, v1::LEARNER)},
      {v1::REFERENCE, &d.reference(), loop::WorkersNeeded(job, v1::REFERENCE)},
      {v1::VERIFIER, &d.verifier(), loop::WorkersNeeded(job, v1::VERIFIER)},
      {v1::ACTOR, &d.actor(), loop::WorkersNeeded(job, v1::ACTOR)}};

  // What each pool must hold, to report a shortfall whole.
  std::map<std::string, int> gpus_needed;
  std::map<std::string, std::vector<std::string>> roles_in_pool;
  for (const RoleDemand& r : demands) {
    if (r.count == 0) continue;
    const std::string& pool = r.deployment->pool();
    if (!pools.count(pool)) {
      std::vector<std::string> names;
      for (const auto& [name, nodes] : pools) names.push_back(name);
      return absl::FailedPreconditionError(
          absl::StrCat("deployment.", config::RoleName(r.role), ".pool: no pool '", pool,
                       "' in the cluster (pools: ", absl::StrJoin(names, ", "), ")"));
    }
    gpus_needed[pool] += r.count * r.deployment->gpus_per_worker();
    roles_in_pool[pool].push_back(config::RoleName(r.role));
  }
  for (const auto& [pool, needed] : gpus_needed) {
    int have = 0;
    for (const NodeState& n : pools[pool]) have += static_cast<int>(n.free_gpus.size());
    if (needed > have) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pool '", pool, "': the job needs ", needed, " GPUs (",
          absl::StrJoin(roles_in_pool[pool], ", "), "), the pool has ", have, ": short by ",
          needed - have));
    }
  }

  std::vector<WorkerPlacement> placements;
  for (const RoleDemand& r : demands) {
    const int want = r.deployment->gpus_per_worker();
    for (int i = 0; i < r.count; ++i) {
      std::vector<NodeState>& nodes = pools[r.deployment->pool()];
      NodeState* chosen = nullptr;
      for (NodeState& n : nodes) {
        if (static_cast<int>(n.free_gpus.size()) >= want) {
          chosen = &n;
          break;
        }
      }
      const config::WorkerId id(r.role, i);
      if (chosen == nullptr) {
        std::vector<std::string> free;
        for (const NodeState& n : nodes) {
          free.push_back(absl::StrCat(n.node->name(), " ", n.free_gpus.size()));
        }
        return absl::FailedPreconditionError(absl::StrCat(
            "pool '", r.deployment->pool(), "': ", id.ToString(), " needs ", want,
            " GPUs on one node; free GPUs per node: ", absl::StrJoin(free, ", ")));
      }
      const auto taken = chosen->free_gpus.begin() + want;
      placements.push_back({id, r.deployment->pool(), chosen->node->name(),
                            chosen->node->host(), {chosen->free_gpus.begin(), taken}});
      chosen->free_gpus.erase(chosen->free_gpus.begin(), taken);
    }
  }
  return placements;
}

std::string PlacementTable(const std::vector<WorkerPlacement>& placements) {
  std::string table = "id\trole\tindex\tpool\tnode\thost\tgpus\n";
  for (const WorkerPlacement& p : placements) {
    absl::StrAppend(&table, p.id.ToString(), "\t", config::RoleName(p.id.role()), "\t",
                    p.id.index(), "\t", p.pool, "\t", p.node, "\t", p.host, "\t",
                    p.gpus.empty() ? "-" : absl::StrJoin(p.gpus, ","), "\n");
  }
  return table;
}

}  // namespace trellis::scheduler
