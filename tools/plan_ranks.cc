#include "tools/plan_ranks.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/rank_memory.h"
#include "config/worker_id.h"
#include "tools/plan_activations.h"

namespace trellis::tools {
namespace {

std::string RankRole(v1::Role role) { return config::WorkerId(role).ToString(); }

std::string RankGiB(int64_t bytes) {
  return absl::StrFormat("%.3f GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
}

int64_t RoundUp(double bytes) { return static_cast<int64_t>(std::ceil(bytes)); }

// The whole learner's state from the plan's resident lines.
config::LearnerState WholeLearner(const Plan& plan) {
  config::LearnerState whole;
  for (const PlanLine& l : plan.resident) {
    if (l.role != RankRole(v1::LEARNER)) continue;
    const auto b = static_cast<double>(l.bytes);
    if (l.object == "parameters") whole.parameters = b;
    if (l.object == "gradients") whole.gradients = b;
    if (l.object == "optimizer_state") whole.optimizer_state = b;
    if (l.object == "master_weights") whole.master_weights = b;
  }
  return whole;
}

std::vector<PlanLine> LearnerPerRank(const Plan& plan, const v1::JobConfig& job, PlanLine line,
                                     int learners) {
  const int stage = job.memory().zero_stage();
  const Strategy st = StrategyOf(job);
  const config::LearnerState rank =
      config::LearnerRank(WholeLearner(plan), plan.shape, st.weight_bytes, stage, learners);
  const std::string split = absl::StrCat(", / ", learners, " ranks (ZeRO-", stage, ")");
  std::vector<PlanLine> out;
  const auto set = [&](double bytes) {
    if (RoundUp(bytes) != line.bytes) absl::StrAppend(&line.formula, split);
    line.bytes = RoundUp(bytes);
  };
  if (line.object == "parameters") set(rank.parameters);
  if (line.object == "gradients") set(rank.gradients);
  if (line.object == "optimizer_state") set(rank.optimizer_state);
  if (line.object == "master_weights") set(rank.master_weights);
  // The weights staged for the actors: under the resharding sync each rank
  // stages its own shards; otherwise rank 0 gathers and stages the whole
  // version, and LoRA's adapters stay whole on every rank
  // (docs/parallelism.md): those lines are the single learner's.
  if (line.object == "communication" && config::ReshardsWeights(job) && learners > 1) {
    line.bytes = RoundUp(static_cast<double>(line.bytes) / learners);
    absl::StrAppend(&line.formula, ", / ", learners, " ranks (each stages its own shards)");
  }
  out.push_back(line);
  if (line.object == "parameters" && rank.gathered > 0) {
    out.push_back({line.role, "parameters", RoundUp(rank.gathered),
                   absl::StrCat("gathered for compute: ", st.weight_bytes,
                                " B x (2 blocks x P_block + P_outer), P_block ",
                                config::BlockParameters(plan.shape), ", P_outer ",
                                config::OuterParameters(plan.shape))});
  }
  if (line.object == "gradients" && rank.buckets > 0) {
    out.push_back({line.role, "communication", RoundUp(rank.buckets),
                   "reduce-scatter bucket: the largest unit's gradients, whole, "
                   "gradients x max(P_block, P_outer) / N"});
  }
  return out;
}

// A tensor-parallel replica of K ranks: its whole model and the K slices
// (the K slices alone when `in_place`: an actor under the resharding sync),
// one KV cache, K forwards' workspace at the slice's widths.
PlanLine SlicePerReplica(const config::ModelShape& s, int k, PlanLine line, bool in_place) {
  if (k <= 1) return line;
  const config::ModelShape slice = config::TensorParallelShape(s, k);
  const auto scale = [&](int64_t part, int64_t whole, const std::string& why) {
    line.bytes = RoundUp(static_cast<double>(line.bytes) * part / whole);
    absl::StrAppend(&line.formula, ", x ", part, "/", whole, " (tensor_parallel ", k, ": ", why,
                    ")");
  };
  // The replica's K ranks are threads of one process beside its whole
  // model, sharing one KV cache of every head (config/rank_memory.h).
  if (in_place && line.object == "parameters") {
    scale(k * config::ParameterCount(slice), config::ParameterCount(s),
          "K slices, received in place");
  } else if (line.object == "parameters" || line.object == "reference_model") {
    scale(config::ParameterCount(s) + k * config::ParameterCount(slice),
          config::ParameterCount(s), "the whole model and K slices of it");
  } else if (line.object == "workspace") {
    scale(k * NoGradPerToken(slice), NoGradPerToken(s), "K ranks at the slice's MLP width");
  }
  return line;
}

std::string ProcessName(const v1::JobConfig& job, const std::string& role, int learners) {
  const v1::DeploymentConfig& d = job.deployment();
  if (role == RankRole(v1::LEARNER) && learners > 1) {
    return absl::StrCat(role, " (one of ", learners, " ranks, memory.zero_stage ",
                        job.memory().zero_stage(), ")");
  }
  const int k = role == RankRole(v1::ACTOR)       ? d.actor().tensor_parallel()
                : role == RankRole(v1::REFERENCE) ? d.reference().tensor_parallel()
                                            : 1;
  return k > 1 ? absl::StrCat(role, " (", k, " tensor-parallel ranks on threads)") : role;
}

}  // namespace

std::vector<PlanLine> PerRank(const Plan& plan, const v1::JobConfig& job, const PlanLine& line,
                              int learners) {
  const v1::DeploymentConfig& d = job.deployment();
  if (line.role == RankRole(v1::LEARNER)) return LearnerPerRank(plan, job, line, learners);
  if (line.role == RankRole(v1::ACTOR)) {
    return {SlicePerReplica(plan.shape, d.actor().tensor_parallel(), line,
                            config::ReshardsWeights(job))};
  }
  if (line.role == RankRole(v1::REFERENCE)) {
    return {SlicePerReplica(plan.reference_shape, d.reference().tensor_parallel(), line, false)};
  }
  return {line};
}

RankPlan PlanRank(const Plan& plan, const v1::JobConfig& job, const std::string& role,
                  int learners) {
  RankPlan out;
  out.role = role;
  out.process = ProcessName(job, role, learners);
  for (const PlanLine& l : plan.resident) {
    if (l.role != role) continue;
    for (PlanLine& r : PerRank(plan, job, l, learners)) {
      out.peak_bytes += r.bytes;
      out.resident.push_back(std::move(r));
    }
  }
  const int64_t resident = out.peak_bytes;
  out.peak_stage = "resident";
  for (const PlanStage& st : plan.stages) {
    std::vector<PlanLine> lines;
    int64_t bytes = resident;
    for (const PlanLine& l : st.transient) {
      if (l.role != role) continue;
      for (PlanLine& r : PerRank(plan, job, l, learners)) {
        bytes += r.bytes;
        lines.push_back(std::move(r));
      }
    }
    if (!lines.empty() && bytes > out.peak_bytes) {
      out.peak_bytes = bytes;
      out.peak_stage = st.stage;
      out.peak_transient = std::move(lines);
    }
  }
  return out;
}

ProcessPlan PlanProcesses(const Plan& plan, const v1::JobConfig& job) {
  ProcessPlan out;
  out.learners = std::max(1, job.deployment().learner().count());
  out.embedded_bytes = plan.peak_bytes;
  out.limit_bytes = job.memory().process_memory_limit_bytes();
  for (v1::Role role : {v1::LEARNER, v1::ACTOR, v1::REFERENCE}) {
    const auto named = [&](const PlanLine& l) { return l.role == RankRole(role); };
    if (std::any_of(plan.resident.begin(), plan.resident.end(), named)) {
      out.ranks.push_back(PlanRank(plan, job, RankRole(role), out.learners));
    }
  }
  if (out.limit_bytes > 0) {
    out.smallest_learner_count =
        config::SmallestLearnerCount(static_cast<double>(out.limit_bytes), [&](int n) {
          return static_cast<double>(PlanRank(plan, job, RankRole(v1::LEARNER), n).peak_bytes);
        });
  }
  return out;
}

absl::Status CheckProcessPlan(const ProcessPlan& processes) {
  if (processes.limit_bytes <= 0) return absl::OkStatus();
  for (const RankPlan& r : processes.ranks) {
    if (r.peak_bytes <= processes.limit_bytes) continue;
    const bool learner = r.role == RankRole(v1::LEARNER);
    std::string advice;
    if (learner && processes.smallest_learner_count > 0) {
      advice = absl::StrCat("; the smallest deployment.learner.count that fits: ",
                            processes.smallest_learner_count);
    } else if (learner) {
      advice = absl::StrCat("; no deployment.learner.count up to ", config::kMaxLearnerRanks,
                            " fits");
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "memory.process_memory_limit_bytes: ", r.process, " peaks at ", RankGiB(r.peak_bytes), " (",
        r.peak_bytes, " bytes, at ", r.peak_stage, ") by the plan, over the limit ",
        RankGiB(processes.limit_bytes), " (", processes.limit_bytes, " bytes)", advice));
  }
  return absl::OkStatus();
}

void PrintProcessPlan(const ProcessPlan& p, std::ostream& out) {
  out << absl::StrFormat(
      "\n== processes (`trellis launch`: each rank its own process), limit %s ==\n",
      p.limit_bytes > 0 ? RankGiB(p.limit_bytes) : "none");
  const auto verdict = [&](int64_t bytes) {
    return p.limit_bytes <= 0 ? "" : bytes <= p.limit_bytes ? ", fits" : ", OVER THE LIMIT";
  };
  for (const RankPlan& r : p.ranks) {
    out << absl::StrFormat("\n-- %s: peak %s at %s%s --\n", r.process, RankGiB(r.peak_bytes),
                           r.peak_stage, verdict(r.peak_bytes));
    for (const std::vector<PlanLine>* lines : {&r.resident, &r.peak_transient}) {
      for (const PlanLine& l : *lines) {
        out << absl::StrFormat("  %-16s %12s  %s\n", l.object, RankGiB(l.bytes), l.formula);
      }
    }
  }
  out << absl::StrFormat("\n`trellis run` (one process, every role whole): peak %s%s\n",
                         RankGiB(p.embedded_bytes), verdict(p.embedded_bytes));
  if (p.limit_bytes > 0) {
    out << (p.smallest_learner_count > 0
                ? absl::StrCat("smallest learner count that fits the limit: ",
                               p.smallest_learner_count, "\n")
                : absl::StrCat("no learner count up to ", config::kMaxLearnerRanks,
                               " fits the limit\n"));
  }
}

nlohmann::json ProcessPlanJson(const ProcessPlan& p) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankPlan& r : p.ranks) {
    nlohmann::json lines = nlohmann::json::array();
    for (const std::vector<PlanLine>* ls : {&r.resident, &r.peak_transient}) {
      for (const PlanLine& l : *ls) {
        lines.push_back({{"object", l.object}, {"bytes", l.bytes}, {"formula", l.formula}});
      }
    }
    ranks.push_back({{"process", r.process},
                     {"role", r.role},
                     {"peak_bytes", r.peak_bytes},
                     {"peak_stage", r.peak_stage},
                     {"lines", lines}});
  }
  return {{"learners", p.learners},
          {"ranks", ranks},
          {"embedded_bytes", p.embedded_bytes},
          {"limit_bytes", p.limit_bytes},
          {"smallest_learner_count", p.smallest_learner_count}};
}

}  // namespace trellis::tools
