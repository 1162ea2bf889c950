#include "scheduler/placement.h"

#include <algorithm>
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
  // Ranks per worker: deployment.<role>.tensor_parallel for the actor and
  // the reference, 1 for the others.
  int tp = 1;

  int gpus() const { return count * tp * deployment->gpus_per_worker(); }
  // "actor 4: 2 replicas x tensor_parallel 2 x 1 GPU", "learner 2: 2 ranks x 1 GPU".
  std::string Describe() const {
    const auto n = [](int count, const char* noun) {
      return absl::StrCat(count, " ", noun, count == 1 ? "" : "s");
    };
    const std::string unit = n(deployment->gpus_per_worker(), "GPU");
    if (tp > 1) {
      return absl::StrCat(config::RoleName(role), " ", gpus(), ": ", n(count, "replica"),
                          " x tensor_parallel ", tp, " x ", unit);
    }
    return absl::StrCat(config::RoleName(role), " ", gpus(), ": ",
                        n(count, role == v1::LEARNER ? "rank" : "worker"), " x ", unit);
  }
};

// GPUs held by colocated workers, at most one worker of each role.
struct SharedGpus {
  NodeState* node = nullptr;
  std::vector<int> gpus;
  std::set<v1::Role> roles;
};

// The first node of a pool with `gpus` free GPUs; null when none has.
NodeState* FirstFit(std::vector<NodeState>& nodes, int gpus) {
  for (NodeState& n : nodes) {
    if (static_cast<int>(n.free_gpus.size()) >= gpus) return &n;
  }
  return nullptr;
}

// Whether `role` time-shares GPUs under `job`'s placement (the verifier
// never does).
bool Colocated(const v1::JobConfig& job, v1::Role role) {
  return job.deployment().placement() == v1::DeploymentConfig::COLOCATED && role != v1::VERIFIER;
}

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
      {v1::REFERENCE, &d.reference(), loop::WorkersNeeded(job, v1::REFERENCE),
       std::max(1, d.reference().tensor_parallel())},
      {v1::VERIFIER, &d.verifier(), loop::WorkersNeeded(job, v1::VERIFIER)},
      {v1::ACTOR, &d.actor(), loop::WorkersNeeded(job, v1::ACTOR),
       std::max(1, d.actor().tensor_parallel())}};
  std::vector<v1::Role> computing;
  for (const RoleDemand& r : demands) {
    if (r.count > 0 && r.role != v1::VERIFIER) computing.push_back(r.role);
  }
  if (absl::Status s = config::ValidateLaunchDevices(job, computing); !s.ok()) return s;

  // What each pool must hold, to report a shortfall whole; colocated roles
  // (one pool, one gpus_per_worker: ValidateLaunchDevices) need the GPUs of
  // their largest count once.
  std::map<std::string, int> gpus_needed, colocated_needed;
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
    if (Colocated(job, r.role)) {
      colocated_needed[pool] = std::max(colocated_needed[pool], r.gpus());
    } else {
      gpus_needed[pool] += r.gpus();
    }
    if (r.gpus() > 0) roles_in_pool[pool].push_back(r.Describe());
  }
  for (const auto& [pool, needed] : colocated_needed) gpus_needed[pool] += needed;
  for (const auto& [pool, needed] : gpus_needed) {
    int have = 0;
    for (const NodeState& n : pools[pool]) have += static_cast<int>(n.free_gpus.size());
    if (needed > have) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pool '", pool, "': the job needs ", needed, " GPUs (",
          absl::StrJoin(roles_in_pool[pool], "; "),
          colocated_needed.count(pool) > 0 ? "; colocated roles share their largest" : "",
          "), the pool has ", have, ": short by ", needed - have));
    }
  }

  std::vector<WorkerPlacement> placements;
  std::map<std::string, std::vector<SharedGpus>> shared;  // per pool
  for (const RoleDemand& r : demands) {
    const int want = r.deployment->gpus_per_worker();
    const std::string& pool = r.deployment->pool();
    std::vector<NodeState>& nodes = pools[pool];
    for (int i = 0; i < r.count; ++i) {
      const config::WorkerId id(r.role, i);
      // A tensor-parallel group on one node where a node has room for it.
      NodeState* group_node = r.tp > 1 ? FirstFit(nodes, r.tp * want) : nullptr;
      for (int rank = 0; rank < r.tp; ++rank) {
        WorkerPlacement placed{id, pool, "", "", {}, rank, r.tp};
        // A colocated rank joins the first GPUs held by colocated ranks of
        // other roles that none of its own role holds yet.
        if (Colocated(job, r.role) && want > 0) {
          auto& groups = shared[pool];
          auto joined = std::find_if(groups.begin(), groups.end(),
                                     [&r](const SharedGpus& g) { return !g.roles.count(r.role); });
          if (joined != groups.end()) {
            joined->roles.insert(r.role);
            placed.node = joined->node->node->name();
            placed.host = joined->node->node->host();
            placed.gpus = joined->gpus;
            placements.push_back(std::move(placed));
            continue;
          }
        }
        NodeState* chosen = group_node != nullptr ? group_node : FirstFit(nodes, want);
        if (chosen == nullptr) {
          std::vector<std::string> free;
          for (const NodeState& n : nodes) {
            free.push_back(absl::StrCat(n.node->name(), " ", n.free_gpus.size()));
          }
          return absl::FailedPreconditionError(absl::StrCat(
              "pool '", pool, "': ", id.ToString(),
              r.tp > 1 ? absl::StrCat(" tensor-parallel rank ", rank, " of ", r.tp) : "",
              " needs ", want, " GPUs on one node; free GPUs per node: ",
              absl::StrJoin(free, ", ")));
        }
        const auto taken = chosen->free_gpus.begin() + want;
        placed.node = chosen->node->name();
        placed.host = chosen->node->host();
        placed.gpus = {chosen->free_gpus.begin(), taken};
        chosen->free_gpus.erase(chosen->free_gpus.begin(), taken);
        if (Colocated(job, r.role) && want > 0) {
          shared[pool].push_back({chosen, placed.gpus, {r.role}});
        }
        placements.push_back(std::move(placed));
      }
    }
  }
  return placements;
}

std::string PlacementTable(const std::vector<WorkerPlacement>& placements) {
  std::string table = "id\trole\tindex\tpool\tnode\thost\tgpus\ttp_rank\n";
  for (const WorkerPlacement& p : placements) {
    absl::StrAppend(&table, p.id.ToString(), "\t", config::RoleName(p.id.role()), "\t",
                    p.id.index(), "\t", p.pool, "\t", p.node, "\t", p.host, "\t",
                    p.gpus.empty() ? "-" : absl::StrJoin(p.gpus, ","), "\t",
                    p.tp_size > 1 ? absl::StrCat(p.tp_rank, "/", p.tp_size) : "-", "\n");
  }
  return table;
}

std::string CudaVisibleDevices(const std::vector<WorkerPlacement>& placed,
                               const WorkerPlacement& placement) {
  std::vector<int> gpus = placement.gpus;
  if (placement.tp_rank == 0 && placement.tp_size > 1) {
    for (int rank = 1; rank < placement.tp_size; ++rank) {
      for (const WorkerPlacement& p : placed) {
        if (p.id == placement.id && p.tp_rank == rank && p.node == placement.node) {
          gpus.insert(gpus.end(), p.gpus.begin(), p.gpus.end());
        }
      }
    }
  }
  return absl::StrJoin(gpus, ",");
}

}  // namespace trellis::scheduler
