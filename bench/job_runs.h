#ifndef TRELLIS_BENCH_JOB_RUNS_H_
#define TRELLIS_BENCH_JOB_RUNS_H_

// What the benchmarks that run whole jobs share: an embedded run that ends
// the benchmark when it fails, and a run's step records.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run/embedded_job.h"

namespace trellis::bench {

// Runs `job` into `dir` (emptied first) with the roles `bind` makes (the
// embedded run's by default); on failure prints why and the run's progress,
// and exits 1.
inline void RunJobOrExit(const v1::JobConfig& job, const std::filesystem::path& dir,
                         const run::RoleBinder& bind = run::BindLocalRoles) {
  std::filesystem::remove_all(dir);
  std::ostringstream progress;
  if (absl::Status s = run::RunJob(job, dir.string(), nullptr, bind, progress); !s.ok()) {
    std::cerr << dir << ": " << s << "\n" << progress.str();
    std::exit(1);
  }
}

// The "step" records of DIR/ledger.jsonl, in order.
inline std::vector<nlohmann::json> StepRecords(const std::filesystem::path& dir) {
  std::vector<nlohmann::json> steps;
  std::ifstream in(dir / "ledger.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json rec = nlohmann::json::parse(line, nullptr, false);
    if (!rec.is_discarded() && rec["type"] == "step") steps.push_back(std::move(rec));
  }
  return steps;
}

}  // namespace trellis::bench

#endif  // TRELLIS_BENCH_JOB_RUNS_H_
