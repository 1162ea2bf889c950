#include "tools/probe.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "config/job_config.h"
#include "env/run_dir.h"
#include "run/embedded_job.h"

namespace trellis::tools {
namespace {

using nlohmann::json;

// "a.b.c" = value as the YAML "a:\n  b:\n    c: value\n", read into `job`.
absl::Status SetField(const std::string& path, const std::string& value, v1::JobConfig* job) {
  std::string yaml;
  std::string indent;
  const std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::StrAppend(&yaml, indent, parts[i], ":", i + 1 == parts.size() ? " " + value : "", "\n");
    indent += "  ";
  }
  return config::ParseYamlInto(yaml, absl::StrCat("--vary ", path, "=", value), job);
}

std::map<std::string, int64_t> Composition(const ledger::PeakAttribution& peak) {
  std::map<std::string, int64_t> out;
  for (const ledger::ObjectShare& o : peak.objects) out[o.role + "/" + o.object] += o.bytes;
  out["unattributed"] = peak.unattributed_bytes;
  return out;
}

}  // namespace

absl::Status ApplyProbeSetting(const std::string& key, const std::string& value,
                               v1::JobConfig* job) {
  if (key == "micro_batch") return SetField("grpo.micro_batch_size", value, job);
  if (key == "seq_len") return SetField("sampling.max_new_tokens", value, job);
  if (key == "optimizer") {
    if (absl::Status s = SetField("sft.optimizer.name", value, job); !s.ok()) return s;
    return SetField("grpo.optimizer.name", value, job);
  }
  if (key == "accumulation") {
    int steps = 0;
    if (!absl::SimpleAtoi(value, &steps) || steps < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--vary accumulation=", value, ": expected a positive number of micro-batches"));
    }
    const int samples = job->grpo().prompts_per_step() * job->grpo().responses_per_prompt();
    job->mutable_grpo()->set_micro_batch_size((samples + steps - 1) / steps);
    return absl::OkStatus();
  }
  if (key == "strategy") {
    // A memory strategy of job.memory, on top of the job's own settings.
    if (value == "none") return absl::OkStatus();
    if (value == "checkpointing") return SetField("memory.activation_checkpointing", "true", job);
    if (value == "bf16") return SetField("memory.precision", "bf16", job);
    if (value == "lora") return SetField("memory.lora.rank", "8", job);
    return absl::InvalidArgumentError(absl::StrCat(
        "--vary strategy=", value, ": expected none, checkpointing, bf16 or lora"));
  }
  if (key.find('.') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--vary ", key, ": unknown key; expected micro_batch, seq_len, accumulation, optimizer, "
        "strategy or a job field's dotted path (e.g. grpo.optimizer.momentum)"));
  }
  return SetField(key, value, job);
}

absl::StatusOr<ProbeResult> RunProbe(const v1::JobConfig& job, const ProbeOptions& options) {
  if (options.values.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--vary ", options.key, ": needs at least two values"));
  }
  ProbeResult result;
  result.options = options;
  for (const std::string& value : options.values) {
    v1::JobConfig setting = job;
    if (absl::Status s = ApplyProbeSetting(options.key, value, &setting); !s.ok()) return s;
    setting.mutable_grpo()->set_steps(options.steps);
    setting.mutable_sft()->set_steps(std::min(setting.sft().steps(), options.steps));
    setting.mutable_eval()->set_num_prompts(options.eval_prompts);
    setting.mutable_runtime()->set_checkpoint_every(0);
    ProbeSetting run;
    run.value = value;
    run.dir = absl::StrCat(options.out_dir, "/", options.key, "=", value);
    const env::RunDir run_dir(run.dir);
    if (absl::Status s = env::Env::Default()->CreateDir(run.dir); !s.ok()) return s;
    std::ofstream log(run_dir.ProgressLog());
    if (absl::Status s = run::RunEmbeddedJob(setting, run.dir, log); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("probe ", options.key, "=", value, ": ", s.message()));
    }
    log.close();
    if (!log) {
      return absl::DataLossError(absl::StrCat("probe ", options.key, "=", value, ": writing ",
                                              run_dir.ProgressLog(), " failed"));
    }
    const std::string summary_path = run_dir.Summary();
    try {
      std::ifstream in(summary_path);
      const json summary = json::parse(in);
      const json& memory = summary.at("memory");
      run.run_peak_bytes = memory.at("peak_bytes").get<int64_t>();
      run.run_peak_stage = memory.at("peak_stage").get<std::string>();
      const json& roles = memory.at("role_peaks");
      if (!roles.contains(options.role)) {
        return absl::NotFoundError(absl::StrCat(summary_path, ": no peak of role ",
                                                options.role, " (is the memory tracker on?)"));
      }
      run.peak = ledger::PeakAttributionFromJson(roles.at(options.role));
    } catch (const json::exception& e) {
      return absl::DataLossError(absl::StrCat(summary_path, ": ", e.what()));
    }
    result.settings.push_back(std::move(run));
  }
  const std::map<std::string, int64_t> first = Composition(result.settings.front().peak);
  const std::map<std::string, int64_t> last = Composition(result.settings.back().peak);
  std::map<std::string, ObjectMove> moves;
  for (const auto& [name, bytes] : first) moves[name] = {name, bytes, 0};
  for (const auto& [name, bytes] : last) {
    moves[name].object = name;
    moves[name].last = bytes;
  }
  for (auto& [name, move] : moves) result.moves.push_back(move);
  std::stable_sort(result.moves.begin(), result.moves.end(),
                   [](const ObjectMove& a, const ObjectMove& b) {
                     return std::llabs(a.delta()) > std::llabs(b.delta());
                   });
  result.pressure_object = !result.moves.empty() && result.moves[0].delta() != 0
                               ? result.moves[0].object
                               : "none";
  return result;
}

void PrintProbe(const ProbeResult& r, std::ostream& out) {
  const auto mib = [](int64_t b) { return static_cast<double>(b) / (1 << 20); };
  out << absl::StrFormat("peak of %s per setting of %s:\n", r.options.role, r.options.key);
  for (const ProbeSetting& s : r.settings) {
    out << absl::StrFormat("  %s=%-8s peak %9.3f MiB in %-8s (step %d); process peak %9.3f MiB "
                           "in %s\n",
                           r.options.key, s.value, mib(s.peak.measured_bytes), s.peak.stage,
                           s.peak.step, mib(s.run_peak_bytes), s.run_peak_stage);
  }
  out << absl::StrFormat("\nobjects at the peak, %s=%s -> %s:\n", r.options.key,
                         r.settings.front().value, r.settings.back().value);
  for (const ObjectMove& m : r.moves) {
    out << absl::StrFormat("  %-32s %9.3f -> %9.3f MiB  (%+.3f)\n", m.object, mib(m.first),
                           mib(m.last), mib(m.delta()));
  }
  out << absl::StrFormat("\npressure object: %s (peak in stage %s)\n", r.pressure_object,
                         r.settings.back().peak.stage);
}

json ProbeJson(const ProbeResult& r) {
  json settings = json::array();
  for (const ProbeSetting& s : r.settings) {
    settings.push_back({{"value", s.value},
                        {"dir", s.dir},
                        {"peak", ledger::PeakAttributionJson(s.peak)},
                        {"run_peak_bytes", s.run_peak_bytes},
                        {"run_peak_stage", s.run_peak_stage}});
  }
  json moves = json::array();
  for (const ObjectMove& m : r.moves) {
    moves.push_back(
        {{"object", m.object}, {"first", m.first}, {"last", m.last}, {"delta", m.delta()}});
  }
  return {{"key", r.options.key},
          {"role", r.options.role},
          {"steps", r.options.steps},
          {"settings", settings},
          {"moves", moves},
          {"pressure_object", r.pressure_object},
          {"peak_stage", r.settings.back().peak.stage}};
}

}  // namespace trellis::tools
