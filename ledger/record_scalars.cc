#include "ledger/record_scalars.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "ledger/internal/record_json.h"

namespace trellis::ledger {
namespace {

using nlohmann::json;

std::string Tag(const std::string& prefix, const std::string& key) {
  std::string tag = prefix + key;
  for (char& c : tag) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.' || c == '/' || c == ' ';
    if (!ok) c = '_';
  }
  return tag;
}

int64_t Sum(const std::map<std::string, int64_t>& objects) {
  int64_t total = 0;
  for (const auto& [object, bytes] : objects) total += bytes;
  return total;
}

}  // namespace

void AppendScalars(const json& j, const std::string& prefix, std::vector<Scalar>* out) {
  for (const auto& [key, value] : j.items()) {
    if (value.is_object()) {
      AppendScalars(value, Tag(prefix, key) + "/", out);
    } else if (value.is_boolean()) {
      out->push_back({Tag(prefix, key), value.get<bool>() ? 1.0 : 0.0});
    } else if (value.is_number() && std::isfinite(value.get<double>())) {
      out->push_back({Tag(prefix, key), value.get<double>()});
    }
  }
}

absl::StatusOr<std::optional<ScalarPoint>> RecordScalars::Add(std::string_view record) {
  absl::StatusOr<json> parsed = internal::ParseRecord(record);
  if (!parsed.ok()) return parsed.status();
  json& r = *parsed;
  const std::string type = r["type"].get<std::string>();
  if (type == "object") {
    const std::string role = internal::Str(r, "role");
    std::map<std::string, int64_t>& objects = held_[role];
    // The step's first report: the role held its objects as they were.
    int64_t& peak = step_peak_.try_emplace(role, Sum(objects)).first->second;
    objects[internal::Str(r, "object")] = internal::Int(r, "bytes");
    peak = std::max(peak, Sum(objects));
    return std::nullopt;
  }
  if (type == "eval") {
    ScalarPoint point{internal::Int(r, "step") + 1, {}};
    r.erase("type");
    r.erase("step");
    r.erase("label");
    AppendScalars(r, "eval/", &point.scalars);
    return point;
  }
  if (type != "step") return std::nullopt;
  ScalarPoint point{internal::Int(r, "step"), {}};
  r.erase("type");
  r.erase("step");
  r.erase("time");
  AppendScalars(r, "", &point.scalars);
  for (const auto& [role, objects] : held_) {
    auto it = step_peak_.find(role);
    const int64_t bytes = it != step_peak_.end() ? it->second : Sum(objects);
    point.scalars.push_back({Tag("memory_peak_bytes/", role), static_cast<double>(bytes)});
  }
  step_peak_.clear();
  return point;
}

}  // namespace trellis::ledger
