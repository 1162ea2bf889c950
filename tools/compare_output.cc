// The output of `trellis compare`: the table, its Markdown and its JSON
// (compare.h); CompareRuns (compare.cc) gathers what they show.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "config/worker_id.h"
#include "tools/compare.h"

namespace trellis::tools {
namespace {

using nlohmann::json;

std::string Mib(int64_t bytes) {
  return absl::StrFormat("%.2f MiB", static_cast<double>(bytes) / (1 << 20));
}

// The objects resident at `p`; only `role`'s when it is not empty.
std::string PeakObjects(const ledger::PeakAttribution& p, const std::string& role = "") {
  std::vector<std::string> parts;
  for (const ledger::ObjectShare& o : p.objects) {
    if (!role.empty() && o.role != role) continue;
    parts.push_back(absl::StrCat(role.empty() ? o.role + " " : "", o.object, " ", Mib(o.bytes)));
  }
  parts.push_back(absl::StrCat("unattributed ", Mib(p.unattributed_bytes)));
  return absl::StrJoin(parts, "; ");
}

// The table's rows: a label and one cell per run.
std::vector<std::pair<std::string, std::vector<std::string>>> Rows(const Comparison& c) {
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  auto add = [&](const std::string& label, auto cell) {
    std::vector<std::string> cells;
    for (const RunFacts& r : c.runs) cells.push_back(cell(r));
    rows.emplace_back(label, std::move(cells));
  };
  add("run", [](const RunFacts& r) { return r.dir; });
  add("changes", [](const RunFacts& r) {
    return r.changes.empty() ? std::string("(baseline)") : absl::StrJoin(r.changes, "; ");
  });
  add("peak", [](const RunFacts& r) { return Mib(r.peak_bytes); });
  std::set<std::string> processes;
  for (const RunFacts& r : c.runs) {
    for (const auto& [name, process] : r.processes) processes.insert(name);
  }
  for (const std::string& name : processes) {
    add(name + " allocated / held / resident", [&name](const RunFacts& r) {
      auto it = r.processes.find(name);
      if (it == r.processes.end() || it->second.resident_peak_bytes <= 0) return std::string("-");
      const ProcessFacts& p = it->second;
      return absl::StrFormat(
          "%s / %s / %s (named %.1f%%)", Mib(p.allocated_bytes), Mib(p.heap_held_bytes),
          Mib(p.resident_peak_bytes),
          100.0 * std::min(p.named_bytes, p.resident_peak_bytes) / p.resident_peak_bytes);
    });
  }
  add("peak source", [](const RunFacts& r) {
    return absl::StrCat(r.peak.role, " / ", r.peak.stage, " (step ", r.peak.step, ")");
  });
  add("resident at peak", [](const RunFacts& r) { return PeakObjects(r.peak); });
  const std::string learner = config::WorkerId(v1::LEARNER).ToString();
  add(learner + " peak", [](const RunFacts& r) {
    return r.learner_peak.role.empty()
               ? std::string("-")
               : absl::StrCat(Mib(r.learner_peak.measured_bytes), " in ", r.learner_peak.stage);
  });
  add(learner + " objects at its peak",
      [&learner](const RunFacts& r) { return PeakObjects(r.learner_peak, learner); });
  add("step time", [](const RunFacts& r) { return absl::StrFormat("%.4f s", r.step_seconds); });
  std::vector<std::string> stages;
  for (const RunFacts& r : c.runs) {
    for (const auto& [stage, seconds] : r.stage_seconds) {
      if (seconds > 0 && std::find(stages.begin(), stages.end(), stage) == stages.end()) {
        stages.push_back(stage);
      }
    }
  }
  for (const std::string& stage : stages) {
    add("  " + stage, [&stage](const RunFacts& r) {
      auto it = r.stage_seconds.find(stage);
      return absl::StrFormat("%.4f s", it == r.stage_seconds.end() ? 0.0 : it->second);
    });
  }
  add("  recompute (in update)",
      [](const RunFacts& r) { return absl::StrFormat("%.4f s", r.recompute_seconds); });
  add("tokens/s generated",
      [](const RunFacts& r) { return absl::StrFormat("%.0f", r.generated_tokens_per_second); });
  add("tokens/s trained",
      [](const RunFacts& r) { return absl::StrFormat("%.0f", r.trained_tokens_per_second); });
  add("learner GFLOP/s (utilization)", [](const RunFacts& r) {
    return absl::StrFormat("%.3f (%.1f%%)", r.learner_flops_per_second / 1e9, 100 * r.utilization);
  });
  add("quality",
      [](const RunFacts& r) { return absl::StrFormat("%.4f (%s)", r.quality, r.quality_metric); });
  add("communication: weight sync", [](const RunFacts& r) { return Mib(r.communication_bytes); });
  add("communication: learner ranks / step", [](const RunFacts& r) {
    return absl::StrFormat("%s in %.4f s", Mib(static_cast<int64_t>(r.learner_communication_bytes)),
                           r.learner_communication_seconds);
  });
  if (std::any_of(c.runs.begin(), c.runs.end(),
                  [](const RunFacts& r) { return r.move_bytes > 0; })) {
    add("moves device<->host / step", [](const RunFacts& r) {
      return absl::StrFormat("%s in %.4f s", Mib(static_cast<int64_t>(r.move_bytes)),
                             r.move_seconds);
    });
  }
  add("failures", [](const RunFacts& r) { return absl::StrCat(r.failures); });
  return rows;
}

std::string VerdictLine(const Verdict& v) {
  return absl::StrFormat("%d. %s: %s (step time x%.2f, peak x%.2f)", v.rank, v.dir, v.reason,
                         v.step_time_ratio, v.peak_ratio);
}

json ProcessesJson(const std::map<std::string, ProcessFacts>& processes) {
  json out = json::object();
  for (const auto& [name, p] : processes) {
    out[name] = {{"allocated_bytes", p.allocated_bytes},
                 {"heap_held_bytes", p.heap_held_bytes},
                 {"resident_peak_bytes", p.resident_peak_bytes},
                 {"named_bytes", p.named_bytes}};
  }
  return out;
}

}  // namespace

void PrintComparison(const Comparison& c, std::ostream& out) {
  const auto rows = Rows(c);
  size_t label_width = 0;
  std::vector<size_t> widths(c.runs.size(), 0);
  for (const auto& [label, cells] : rows) {
    label_width = std::max(label_width, label.size());
    for (size_t i = 0; i < cells.size(); ++i) {
      widths[i] = std::max(widths[i], std::min<size_t>(cells[i].size(), 60));
    }
  }
  for (const auto& [label, cells] : rows) {
    out << absl::StrFormat("%-*s", static_cast<int>(label_width), label);
    for (size_t i = 0; i < cells.size(); ++i) {
      out << " | " << absl::StrFormat("%-*s", static_cast<int>(widths[i]), cells[i]);
    }
    out << "\n";
  }
  out << absl::StrFormat(
      "\nverdict (quality within %.4f of the baseline, step time within x%.2f; not by memory):\n",
      c.options.quality_tolerance, c.options.step_time_budget);
  for (const Verdict& v : c.verdicts) out << "  " << VerdictLine(v) << "\n";
}

std::string ComparisonMarkdown(const Comparison& c) {
  std::ostringstream md;
  md << "# Strategy comparison\n\nBaseline: `" << c.runs[0].dir << "`\n\n";
  const auto rows = Rows(c);
  for (const auto& [label, cells] : rows) {
    md << "| " << label << " | " << absl::StrJoin(cells, " | ") << " |\n";
    if (&label == &rows.front().first) {
      md << "|---|";
      for (size_t i = 0; i < cells.size(); ++i) md << "---|";
      md << "\n";
    }
  }
  md << absl::StrFormat(
      "\n## Verdict\n\nQuality kept within %.4f of the baseline, then step time within x%.2f "
      "of the baseline's, then faster first; least memory is not the criterion.\n\n",
      c.options.quality_tolerance, c.options.step_time_budget);
  for (const Verdict& v : c.verdicts) md << VerdictLine(v) << "\n";
  return md.str();
}

json ComparisonJson(const Comparison& c) {
  json runs = json::array();
  for (const RunFacts& r : c.runs) {
    runs.push_back({{"dir", r.dir},
                    {"changes", r.changes},
                    {"workload_changes", r.workload_changes},
                    {"peak_bytes", r.peak_bytes},
                    {"peak", ledger::PeakAttributionJson(r.peak)},
                    {"learner_peak", ledger::PeakAttributionJson(r.learner_peak)},
                    {"processes", ProcessesJson(r.processes)},
                    {"stage_seconds", r.stage_seconds},
                    {"step_seconds", r.step_seconds},
                    {"steps", r.steps},
                    {"generated_tokens_per_second", r.generated_tokens_per_second},
                    {"trained_tokens_per_second", r.trained_tokens_per_second},
                    {"learner_flops_per_second", r.learner_flops_per_second},
                    {"utilization", r.utilization},
                    {"quality_metric", r.quality_metric},
                    {"quality", r.quality},
                    {"communication_bytes", r.communication_bytes},
                    {"recompute_seconds", r.recompute_seconds},
                    {"learner_communication_bytes", r.learner_communication_bytes},
                    {"learner_communication_seconds", r.learner_communication_seconds},
                    {"move_bytes", r.move_bytes},
                    {"move_seconds", r.move_seconds},
                    {"failures", r.failures}});
  }
  json verdicts = json::array();
  for (const Verdict& v : c.verdicts) {
    verdicts.push_back({{"dir", v.dir},
                        {"rank", v.rank},
                        {"quality_kept", v.quality_kept},
                        {"within_budget", v.within_budget},
                        {"step_time_ratio", v.step_time_ratio},
                        {"peak_ratio", v.peak_ratio},
                        {"reason", v.reason}});
  }
  return {{"quality_tolerance", c.options.quality_tolerance},
          {"step_time_budget", c.options.step_time_budget},
          {"matmul_flops_per_second", c.options.matmul_flops_per_second},
          {"runs", runs},
          {"verdicts", verdicts}};
}

}  // namespace trellis::tools
