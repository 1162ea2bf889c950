#include "ledger/internal/record_json.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trellis::ledger::internal {

using nlohmann::json;

absl::StatusOr<json> ParseRecord(std::string_view record) {
  json r = json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (!r.is_object() || !r.contains("type") || !r["type"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ledger record: expected a JSON object with a string \"type\", found: ",
                     std::string(record.substr(0, 80))));
  }
  return r;
}

int64_t Int(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : 0;
}

double Num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace trellis::ledger::internal
