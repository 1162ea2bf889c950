#ifndef TRELLIS_LEDGER_INTERNAL_RECORD_JSON_H_
#define TRELLIS_LEDGER_INTERNAL_RECORD_JSON_H_

// Reading ledger records (the lines of ledger.jsonl, ledger/README.md) back:
// the one parser of the run view (run_view.h) and the record scalars
// (record_scalars.h). A missing or mistyped field reads as 0 or "".

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace trellis::ledger::internal {

// The record as JSON; InvalidArgument, quoting the start of the record, when
// it is not a JSON object with a string "type".
[[nodiscard]] absl::StatusOr<nlohmann::json> ParseRecord(std::string_view record);

int64_t Int(const nlohmann::json& j, const char* key);
double Num(const nlohmann::json& j, const char* key);
std::string Str(const nlohmann::json& j, const char* key);

}  // namespace trellis::ledger::internal

#endif  // TRELLIS_LEDGER_INTERNAL_RECORD_JSON_H_
