#include "config/worker_id.h"

#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "config/choice.h"

namespace trellis::config {

std::string RoleName(v1::Role role) { return ChoiceName(role); }

std::string WorkerId::ToString() const {
  if (role_ == v1::SCHEDULER) return RoleName(role_);
  return absl::StrCat(RoleName(role_), "-", index_);
}

absl::StatusOr<WorkerId> WorkerId::Parse(absl::string_view text) {
  const size_t dash = text.rfind('-');
  const std::optional<v1::Role> role = ParseChoice<v1::Role>(text.substr(0, dash));
  int index = 0;
  const bool indexed = dash != absl::string_view::npos &&
                       absl::SimpleAtoi(text.substr(dash + 1), &index) && index >= 0;
  if (role.has_value() && *role != v1::ROLE_UNSPECIFIED &&
      (*role == v1::SCHEDULER ? dash == absl::string_view::npos : indexed)) {
    const WorkerId id(*role, index);
    // Only the canonical spelling: "actor-01" or "Actor-1" is no id.
    if (id.ToString() == text) return id;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "worker id \"", text,
      "\": expected <role>-<index> with role actor, learner, reference or verifier and index >= "
      "0 (\"actor-1\"), or \"scheduler\""));
}

}  // namespace trellis::config
