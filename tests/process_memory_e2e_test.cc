// What a run's process really holds (summary.json memory.process,
// ledger/process_memory.h) on the tiny job, embedded and launched: every
// part and every share non-negative and within the whole, step records with
// their resident peak, and nearly all of each process's peak resident
// memory named: the embedded run's one process, and each launched worker's
// (forwarded to the scheduler: memory.worker_processes).

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "gtest/gtest.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json ReadSummaryMemory(const fs::path& dir) {
  std::ifstream in(dir / "summary.json");
  return json::parse(in)["memory"];
}

// Every part within [0, peak], the parts adding up to named_bytes, named +
// remainder - beyond = peak, and the fraction in [0, 1].
void ExpectConsistent(const json& p, const std::string& run) {
  const int64_t peak = p["peak_resident_bytes"].get<int64_t>();
  EXPECT_GT(peak, 0) << run;
  int64_t named = 0;
  for (const auto& [part, bytes] : p["parts"].items()) {
    EXPECT_GE(bytes.get<int64_t>(), 0) << run << " " << part;
    EXPECT_LE(bytes.get<int64_t>(), peak) << run << " " << part;
    named += bytes.get<int64_t>();
  }
  EXPECT_EQ(named, p["named_bytes"].get<int64_t>()) << run;
  EXPECT_GE(p["remainder_bytes"].get<int64_t>(), 0) << run;
  EXPECT_LE(p["remainder_bytes"].get<int64_t>(), peak) << run;
  EXPECT_GE(p["named_beyond_resident_bytes"].get<int64_t>(), 0) << run;
  EXPECT_EQ(named + p["remainder_bytes"].get<int64_t>() -
                p["named_beyond_resident_bytes"].get<int64_t>(),
            peak)
      << run;
  EXPECT_GE(p["named_fraction"].get<double>(), 0) << run;
  EXPECT_LE(p["named_fraction"].get<double>(), 1) << run;
  // A named copy: items() of the temporary value() would dangle. Workers'
  // accounts have no stage peaks.
  const json stages = p.value("stage_peak_resident_bytes", json::object());
  for (const auto& [stage, bytes] : stages.items()) {
    EXPECT_GT(bytes.get<int64_t>(), 0) << run << " " << stage;
    EXPECT_LE(bytes.get<int64_t>(), peak) << run << " " << stage;
  }
}

// Every step record has a real resident peak.
void ExpectStepPeaks(const fs::path& dir) {
  std::ifstream in(dir / "ledger.jsonl");
  int steps = 0;
  for (std::string line; std::getline(in, line);) {
    const json r = json::parse(line);
    if (r["type"] != "step") continue;
    ++steps;
    EXPECT_GT(r["resident_peak_bytes"].get<int64_t>(), 0) << dir << " step " << r["step"];
  }
  EXPECT_GT(steps, 0) << dir;
}

TEST(ProcessMemoryE2eTest, EmbeddedRunNamesItsPeakResidentMemory) {
  const fs::path root =
      fs::path(::testing::TempDir()) / ("process_memory_e2e_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const v1::JobConfig job = testing_util::VaryingRewardsJob(2);
  testing_util::RunTrellis(root, "run", "embedded", job);
  const json embedded = ReadSummaryMemory(root / "embedded")["process"];
  ExpectConsistent(embedded, "embedded");
  ExpectStepPeaks(root / "embedded");
  EXPECT_GE(embedded["named_fraction"].get<double>(), 0.95) << embedded.dump(2);
  EXPECT_TRUE(ReadSummaryMemory(root / "embedded")["worker_processes"].empty());

  // Launched: the scheduler process's own account, and each worker's.
  testing_util::RunTrellis(root, "launch", "launched", job);
  const json launched = ReadSummaryMemory(root / "launched");
  ExpectConsistent(launched["process"], "launched scheduler");
  ExpectStepPeaks(root / "launched");
  const json& workers = launched["worker_processes"];
  for (const char* worker : {"learner-0", "actor-0"}) {
    EXPECT_TRUE(workers.contains(worker)) << worker << " missing: " << workers.dump(2);
  }
  for (const auto& [worker, p] : workers.items()) {
    ExpectConsistent(p, "launched " + worker);
    EXPECT_GE(p["named_fraction"].get<double>(), 0.95) << worker << ": " << p.dump(2);
  }
}

}  // namespace
}  // namespace trellis
