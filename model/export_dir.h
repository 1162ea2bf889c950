#ifndef TRELLIS_MODEL_EXPORT_DIR_H_
#define TRELLIS_MODEL_EXPORT_DIR_H_

// A directory written whole or not at all (model/hf_export.h writes its
// exports through one): the files go into a temporary sibling, DIR.tmp-PID,
// and Commit renames it to DIR, so a reader finds no DIR or a complete one.

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "env/env.h"

namespace trellis::model {

class StagedDir {
 public:
  // Starts DIR (its missing parents are created). Fails when DIR exists and
  // is not empty (an export never replaces a directory, which may be its
  // own source), or when the temporary directory cannot be made; errors
  // name the path.
  [[nodiscard]] static absl::StatusOr<StagedDir> Begin(const std::string& dir,
                                                       env::Env* env = env::Env::Default());

  StagedDir(StagedDir&& other) noexcept;
  StagedDir& operator=(StagedDir&&) = delete;
  StagedDir(const StagedDir&) = delete;
  StagedDir& operator=(const StagedDir&) = delete;
  // Removes the temporary directory unless committed.
  ~StagedDir();

  // Where the files go until Commit: the temporary directory.
  const std::string& path() const { return tmp_; }
  // The temporary directory's file `name`.
  std::string File(absl::string_view name) const;

  // Writes `contents` to File(name); errors name DIR and `name`.
  [[nodiscard]] absl::Status Write(absl::string_view name, std::string_view contents);

  // Prefixes an error about File(name) with DIR and `name`.
  absl::Status Blame(absl::string_view name, const absl::Status& status) const;

  // Syncs the temporary directory and renames it to DIR.
  [[nodiscard]] absl::Status Commit();

 private:
  StagedDir(std::string dir, std::string tmp, env::Env* env)
      : dir_(std::move(dir)), tmp_(std::move(tmp)), env_(env) {}

  std::string dir_;
  std::string tmp_;  // empty once committed or moved from
  env::Env* env_;
};

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_EXPORT_DIR_H_
