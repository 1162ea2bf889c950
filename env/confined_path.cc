#include "env/confined_path.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace trellis::env {
namespace {

namespace fs = std::filesystem;

// Whether `path` (normal, absolute) is `root` itself or below it.
bool Within(const fs::path& root, const fs::path& path) {
  const fs::path rel = path.lexically_relative(root);
  return !rel.empty() && *rel.begin() != "..";
}

}  // namespace

absl::StatusOr<std::string> ConfinedPath(const std::string& root, const std::string& relative) {
  if (root.empty()) {
    return absl::FailedPreconditionError("no run directory yet (the worker is still registering)");
  }
  if (relative.empty()) return absl::InvalidArgumentError("path: required");
  const fs::path rel(relative);
  if (rel.is_absolute()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "path '", relative, "': absolute; expected a path relative to the run directory"));
  }
  for (const fs::path& part : rel) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("path '", relative, "': '..' leaves the run directory"));
    }
  }
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::absolute(root, ec), ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("run directory ", root, ": ", ec.message()));
  }
  const fs::path joined = base / rel;
  // Symbolic links among the parts that exist, resolved.
  const fs::path resolved = fs::weakly_canonical(joined, ec);
  if (ec || !Within(base, resolved)) {
    return absl::PermissionDeniedError(
        absl::StrCat("path '", relative, "': a symbolic link leads outside the run directory"));
  }
  return joined.lexically_normal().string();
}

absl::StatusOr<std::string> PathInside(const std::string& root, const std::string& path) {
  std::error_code ec;
  const fs::path base = fs::absolute(root, ec).lexically_normal();
  const fs::path full = fs::absolute(path, ec).lexically_normal();
  const fs::path rel = full.lexically_relative(base);
  if (ec || !Within(base, full) || rel == ".") {
    return absl::InvalidArgumentError(
        absl::StrCat("path '", path, "' is not inside the run directory ", root));
  }
  return rel.string();
}

}  // namespace trellis::env
