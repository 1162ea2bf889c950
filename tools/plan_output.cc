// The plan's output: the tables `trellis plan` prints and the JSON it
// writes, for the process (planner.h) and a CUDA job's GPUs
// (plan_device.h). The formulas are in planner.cc and plan_device.cc.
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "absl/strings/str_format.h"
#include "config/choice.h"
#include "config/rank_memory.h"
#include "tools/plan_device.h"
#include "tools/planner.h"

namespace trellis::tools {
namespace {

nlohmann::json LinesJson(const std::vector<PlanLine>& ls) {
  nlohmann::json a = nlohmann::json::array();
  for (const PlanLine& l : ls) {
    a.push_back(
        {{"role", l.role}, {"object", l.object}, {"bytes", l.bytes}, {"formula", l.formula}});
  }
  return a;
}

nlohmann::json PassRateJson(const PassRate& r) {
  return {{"layer_flops_per_second", r.layer_flops_per_second},
          {"outside_flops_per_second", r.outside_flops_per_second}};
}

}  // namespace

void PrintPlan(const Plan& plan, std::ostream& out) {
  const auto mib = [](int64_t b) { return static_cast<double>(b) / (1 << 20); };
  out << absl::StrFormat("model: %d parameters (%d in a token's matrix products)\n",
                         plan.parameters, plan.matmul_parameters);
  if (plan.expert_parameters > 0) {
    out << absl::StrFormat("  experts and routers: %d parameters (%.1f%% of the model)\n",
                           plan.expert_parameters,
                           100.0 * plan.expert_parameters / plan.parameters);
  }
  out << "\n== resident (every stage) ==\n";
  for (const PlanLine& l : plan.resident) {
    out << absl::StrFormat("  %-12s %-16s %10.2f MiB  %s\n", l.role, l.object, mib(l.bytes),
                           l.formula);
  }
  out << absl::StrFormat("  %-29s %10.2f MiB\n", "resident total", mib(plan.resident_bytes));
  for (const PlanStage& st : plan.stages) {
    out << absl::StrFormat("\n== %s / %s: peak %.2f MiB ==\n", st.role, st.stage,
                           mib(st.peak_bytes));
    for (const PlanLine& l : st.transient) {
      out << absl::StrFormat("  %-12s %-16s %10.2f MiB  %s\n", l.role, l.object, mib(l.bytes),
                             l.formula);
    }
  }
  out << absl::StrFormat("\nexpected peak: %.2f MiB (%d bytes), %s / %s\n", mib(plan.peak_bytes),
                         plan.peak_bytes, plan.peak_role, plan.peak_stage);
  const MachineRates& r = plan.rates;
  const auto rate = [](const PassRate& p) {
    return absl::StrFormat("%.2f / %.2f", p.layer_flops_per_second / 1e9,
                           p.outside_flops_per_second / 1e9);
  };
  out << absl::StrFormat(
      "\n== step time (measured here: matrix product %.2f GFLOP/s; the job's model timed at 1 "
      "and %d layers at its shapes, GFLOP/s of the layers / outside them (head, sampling, "
      "dispatch): train %s, forward %s, decode %s; optimizer step %.4f s + L x %.4f s) ==\n",
      r.matmul_flops_per_second / 1e9, r.calibration_layers, rate(r.train), rate(r.forward),
      rate(r.decode), r.optimizer_outside_seconds, r.optimizer_per_layer_seconds);
  for (const PlanTime& t : plan.step_time) {
    out << absl::StrFormat("  %-10s %10.4f s  %.3g FLOP = %s\n", t.stage, t.seconds, t.flops,
                           t.formula);
  }
  out << absl::StrFormat("  %-10s %10.4f s\n", "step", plan.step_seconds);
  out << "\n== CPU offload (device memory freed between uses / host memory held / bytes moved "
         "per step) ==\n";
  for (const PlanOffload& o : plan.offload) {
    out << absl::StrFormat("  %-32s %-3s %10.2f MiB %10.2f MiB %10.2f MiB  %s\n", o.strategy,
                           o.on ? "on" : "off", mib(o.device_bytes_saved), mib(o.host_bytes),
                           mib(o.bytes_moved_per_step), o.formula);
  }
  for (const std::string& note : plan.notes) out << "note: " << note << "\n";
}

nlohmann::json PlanJson(const Plan& plan) {
  using nlohmann::json;
  json stages = json::array();
  for (const PlanStage& st : plan.stages) {
    stages.push_back({{"role", st.role},
                      {"stage", st.stage},
                      {"peak_bytes", st.peak_bytes},
                      {"transient", LinesJson(st.transient)}});
  }
  json time = json::array();
  for (const PlanTime& t : plan.step_time) {
    time.push_back({{"stage", t.stage}, {"flops", t.flops}, {"seconds", t.seconds},
                    {"formula", t.formula}});
  }
  json offload = json::array();
  for (const PlanOffload& o : plan.offload) {
    offload.push_back({{"strategy", o.strategy},
                       {"on", o.on},
                       {"device_bytes_saved", o.device_bytes_saved},
                       {"host_bytes", o.host_bytes},
                       {"bytes_moved_per_step", o.bytes_moved_per_step},
                       {"formula", o.formula}});
  }
  return {{"parameters", plan.parameters},
          {"matmul_parameters", plan.matmul_parameters},
          {"expert_parameters", plan.expert_parameters},
          {"resident", LinesJson(plan.resident)},
          {"resident_bytes", plan.resident_bytes},
          {"stages", stages},
          {"peak_bytes", plan.peak_bytes},
          {"peak_role", plan.peak_role},
          {"peak_stage", plan.peak_stage},
          {"rates",
           {{"matmul_flops_per_second", plan.rates.matmul_flops_per_second},
            {"train", PassRateJson(plan.rates.train)},
            {"forward", PassRateJson(plan.rates.forward)},
            {"decode", PassRateJson(plan.rates.decode)},
            {"optimizer_outside_seconds", plan.rates.optimizer_outside_seconds},
            {"optimizer_per_layer_seconds", plan.rates.optimizer_per_layer_seconds},
            {"calibration_layers", plan.rates.calibration_layers}}},
          {"step_time", time},
          {"step_seconds", plan.step_seconds},
          {"offload", offload},
          {"notes", plan.notes}};
}

void PrintDevicePlan(const DevicePlan& plan, std::ostream& out) {
  const auto gib = [](int64_t b) { return static_cast<double>(b) / (int64_t{1} << 30); };
  out << absl::StrFormat(
      "\n== device memory: runtime.device cuda, deployment.placement %s; each GPU %.2f GiB (%s) "
      "==\n",
      config::ChoiceName(plan.placement), gib(plan.device_bytes), plan.device_source);
  for (const GpuPlan& g : plan.gpus) {
    out << absl::StrFormat(
        "\n-- GPU of %s (%d worker%s, %d GPU%s each): peak %.3f GiB at %s, %s --\n", g.name,
        g.workers, g.workers == 1 ? "" : "s", g.gpus_per_worker, g.gpus_per_worker == 1 ? "" : "s",
        gib(g.peak_bytes), g.peak_stage, g.fits ? "fits" : "DOES NOT FIT");
    for (const PlanLine& l : g.resident) {
      out << absl::StrFormat("  %-12s %-16s %12.3f GiB  %s\n", l.role, l.object, gib(l.bytes),
                             l.formula);
    }
    out << absl::StrFormat("  %-29s %12.3f GiB\n", "resident", gib(g.resident_bytes));
    for (const GpuStage& st : g.stages) {
      out << absl::StrFormat("  + %s: %.3f GiB\n", st.stage, gib(st.bytes));
      for (const PlanLine& l : st.lines) {
        out << absl::StrFormat("    %-12s %-16s %10.3f GiB  %s\n", l.role, l.object, gib(l.bytes),
                               l.formula);
      }
    }
  }
  out << absl::StrFormat("\ndevice memory: %s\n",
                         plan.fits ? "every GPU fits" : "does not fit: see the GPUs marked above");
  if (plan.smallest_learner_count > 0) {
    out << "smallest learner count that fits: " << plan.smallest_learner_count << "\n";
  } else {
    out << "no learner count up to " << config::kMaxLearnerRanks << " fits\n";
  }
  for (const std::string& note : plan.notes) out << "note: " << note << "\n";
}

nlohmann::json DevicePlanJson(const DevicePlan& plan) {
  using nlohmann::json;
  json gpus = json::array();
  for (const GpuPlan& g : plan.gpus) {
    json stages = json::array();
    for (const GpuStage& st : g.stages) {
      stages.push_back({{"stage", st.stage}, {"bytes", st.bytes}, {"lines", LinesJson(st.lines)}});
    }
    gpus.push_back({{"name", g.name},
                    {"workers", g.workers},
                    {"gpus_per_worker", g.gpus_per_worker},
                    {"resident", LinesJson(g.resident)},
                    {"resident_bytes", g.resident_bytes},
                    {"stages", stages},
                    {"peak_bytes", g.peak_bytes},
                    {"peak_stage", g.peak_stage},
                    {"fits", g.fits}});
  }
  return {{"placement", config::ChoiceName(plan.placement)},
          {"device_bytes", plan.device_bytes},
          {"device_source", plan.device_source},
          {"gpus", gpus},
          {"fits", plan.fits},
          {"smallest_learner_count", plan.smallest_learner_count},
          {"notes", plan.notes}};
}

}  // namespace trellis::tools
