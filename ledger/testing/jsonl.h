#ifndef TRELLIS_LEDGER_TESTING_JSONL_H_
#define TRELLIS_LEDGER_TESTING_JSONL_H_

// For tests: every line of a ledger.jsonl file, parsed.

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trellis::ledger::testing_util {

inline std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace trellis::ledger::testing_util

#endif  // TRELLIS_LEDGER_TESTING_JSONL_H_
