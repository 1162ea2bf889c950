#ifndef TRELLIS_LEDGER_TESTING_JSONL_H_
#define TRELLIS_LEDGER_TESTING_JSONL_H_

// For tests: a JSON file parsed, every line of a ledger.jsonl file parsed,
// and a path in the test's temporary folder.

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"

namespace trellis::ledger::testing_util {

inline nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

inline std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

inline std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

}  // namespace trellis::ledger::testing_util

#endif  // TRELLIS_LEDGER_TESTING_JSONL_H_
