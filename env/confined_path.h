#ifndef TRELLIS_ENV_CONFINED_PATH_H_
#define TRELLIS_ENV_CONFINED_PATH_H_

// Files that a caller names inside a directory it may not leave (the run
// directory, for the paths of the learner's and the reference's RPCs).

#include <string>

#include "absl/status/statusor.h"

namespace trellis::env {

// root/relative, once `relative` is known to stay inside `root`:
// InvalidArgument naming it when it is empty, absolute or holds a ".."
// component; PermissionDenied naming it when an existing part of it is a
// symbolic link that leads outside root; FailedPrecondition when root is
// empty.
[[nodiscard]] absl::StatusOr<std::string> ConfinedPath(const std::string& root,
                                                       const std::string& relative);

// `path` relative to `root` (both taken as written, then made absolute
// against the working directory): InvalidArgument naming both when path
// is not inside root.
[[nodiscard]] absl::StatusOr<std::string> PathInside(const std::string& root,
                                                     const std::string& path);

}  // namespace trellis::env

#endif  // TRELLIS_ENV_CONFINED_PATH_H_
