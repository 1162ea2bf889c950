#ifndef TRELLIS_ENV_REGULAR_FILE_H_
#define TRELLIS_ENV_REGULAR_FILE_H_

// Files read by name (model weights, config.json, tokenizer files, chat
// templates, data and job files, checkpoints, the reference's weights) are
// regular files, opened here: a FIFO, socket, device or directory is
// refused at once, never waited on (a FIFO's open is non-blocking, and
// the file's type is checked on the open descriptor before anything is
// read). Errors name the path and what it is, never its contents.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trellis::env {

// How a name may reach its file.
enum class Links {
  // Symbolic links are followed: a model directory may be a Hugging Face
  // cache snapshot, whose files are links into its blobs.
  kFollow,
  // A file the run wrote itself inside its run directory (the reference's
  // weights, a checkpoint's files), which a caller names over an RPC: not
  // a symbolic link (O_NOFOLLOW), and its file's only hard link, so that
  // no link made inside the run directory reaches a file outside it (a
  // file the run writes is renamed into place and has one link).
  kRunFile,
};

// Opens `path` read-only (close-on-exec) as a regular file and returns the
// descriptor, which the caller closes. FailedPrecondition naming the path
// and its type for anything but a regular file; with Links::kRunFile,
// PermissionDenied for a symbolic link or a file with more than one hard
// link; the open's errno otherwise (NotFound, PermissionDenied, ...).
[[nodiscard]] absl::StatusOr<int> OpenRegularFile(const std::string& path,
                                                  Links links = Links::kFollow);

// OK when OpenRegularFile(path, links) would open `path` (it opens and
// closes it): for readers that open by name themselves (std::ifstream).
[[nodiscard]] absl::Status CheckRegularFile(const std::string& path, Links links = Links::kFollow);

}  // namespace trellis::env

#endif  // TRELLIS_ENV_REGULAR_FILE_H_
