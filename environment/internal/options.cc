#include "environment/internal/options.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trellis::environment::internal {

absl::StatusOr<Options> Options::Parse(const v1::EnvironmentConfig& config,
                                       std::initializer_list<const char*> known) {
  Options o;
  o.j_ = nlohmann::json::object();
  if (config.options_json().empty()) return o;
  o.j_ = nlohmann::json::parse(config.options_json(), nullptr, false);
  if (o.j_.is_discarded() || !o.j_.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment.options_json: ", config.name(), " expects a JSON object, found ",
                     o.j_.is_discarded() ? "text that is not JSON" : o.j_.type_name()));
  }
  const std::set<std::string> names(known.begin(), known.end());
  for (const auto& [key, value] : o.j_.items()) {
    if (names.count(key) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment.options_json: ", config.name(), " has no option \"", key,
                       "\"; its options: ", absl::StrJoin(names, ", ")));
    }
  }
  return o;
}

absl::Status Options::Get(const char* key, int64_t* value) const {
  auto it = j_.find(key);
  if (it == j_.end()) return absl::OkStatus();
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat("environment.options_json.", key,
                                                   ": expected an integer, found ", it->dump()));
  }
  *value = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status Options::Get(const char* key, std::string* value) const {
  auto it = j_.find(key);
  if (it == j_.end()) return absl::OkStatus();
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment.options_json.", key, ": expected a string, found ", it->dump()));
  }
  *value = it->get<std::string>();
  return absl::OkStatus();
}

}  // namespace trellis::environment::internal
