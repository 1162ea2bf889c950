// EnvironmentRegistry: environments by name, each made wrapped in the pool.

#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "environment/environment.h"
#include "environment/pool.h"

namespace trellis::environment {
namespace {

// The settings the pool relies on, whatever the environment.
absl::Status CheckPoolSettings(const v1::EnvironmentConfig& c) {
  if (c.call_deadline_ms() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment.call_deadline_ms: must be >= 1, found ", c.call_deadline_ms()));
  }
  if (c.breaker_failures() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment.breaker_failures: must be >= 0, found ", c.breaker_failures()));
  }
  if (c.breaker_pause_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment.breaker_pause_ms: must be >= 0, found ", c.breaker_pause_ms()));
  }
  if (c.workers() < 1 || c.workers() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment.workers: must be in [1, 256], found ", c.workers()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EnvironmentRegistry::Register(const std::string& name, EnvironmentFactory factory) {
  if (name.empty()) return absl::InvalidArgumentError("environment name is empty");
  if (!factory) {
    return absl::InvalidArgumentError(absl::StrCat("environment \"", name, "\": null factory"));
  }
  if (!factories_.emplace(name, std::move(factory)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("environment \"", name, "\" is already registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Environment>> EnvironmentRegistry::Create(
    const v1::EnvironmentConfig& config) const {
  auto it = factories_.find(config.name());
  if (it == factories_.end()) {
    const std::vector<std::string> known = Names();
    return absl::NotFoundError(absl::StrCat(
        "environment.name: unknown environment \"", config.name(),
        "\"; registered environments: ", known.empty() ? "(none)" : absl::StrJoin(known, ", ")));
  }
  if (absl::Status s = CheckPoolSettings(config); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<Environment>> made = it->second(config);
  if (!made.ok()) return made.status();
  if (*made == nullptr) {
    return absl::InternalError(
        absl::StrCat("environment \"", config.name(), "\": factory returned null"));
  }
  return NewEnvironmentPool(*std::move(made), config);
}

bool EnvironmentRegistry::Contains(const std::string& name) const {
  return factories_.count(name) > 0;
}

std::vector<std::string> EnvironmentRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, factory] : factories_) names.push_back(name);
  return names;
}

namespace {
constexpr char kCircuitOpenPayload[] = "trellis.environment/circuit_open";
}  // namespace

std::string FailureReason(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kDeadlineExceeded: return "deadline";
    case absl::StatusCode::kUnavailable:
      return status.GetPayload(kCircuitOpenPayload).has_value() ? "circuit_open" : "unavailable";
    case absl::StatusCode::kInvalidArgument: return "malformed";
    default: return "call_failed";
  }
}

absl::Status CircuitOpen(absl::Status status) {
  status.SetPayload(kCircuitOpenPayload, absl::Cord("1"));
  return status;
}

}  // namespace trellis::environment
