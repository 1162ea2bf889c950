#include "model/export_dir.h"

#include <unistd.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "env/env.h"

namespace trellis::model {

absl::StatusOr<StagedDir> StagedDir::Begin(const std::string& dir, env::Env* env) {
  std::string clean = dir;
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  if (clean.empty()) return absl::InvalidArgumentError("export: the output directory is empty");
  if (env->Exists(clean)) {
    absl::StatusOr<std::vector<std::string>> entries = env->ListDir(clean);
    if (!entries.ok()) return entries.status();
    if (!entries->empty()) {
      return absl::AlreadyExistsError(absl::StrCat(
          clean, ": exists and is not empty; an export is written to a new directory"));
    }
  }
  std::string tmp = absl::StrCat(clean, ".tmp-", ::getpid());
  if (absl::Status s = env->RemoveAll(tmp); !s.ok()) return s;
  if (absl::Status s = env->CreateDir(tmp); !s.ok()) return s;
  return StagedDir(std::move(clean), std::move(tmp), env);
}

StagedDir::StagedDir(StagedDir&& other) noexcept
    : dir_(std::move(other.dir_)), tmp_(std::exchange(other.tmp_, "")), env_(other.env_) {}

StagedDir::~StagedDir() {
  if (!tmp_.empty()) env_->RemoveAll(tmp_).IgnoreError();  // best effort
}

std::string StagedDir::File(absl::string_view name) const { return absl::StrCat(tmp_, "/", name); }

absl::Status StagedDir::Write(absl::string_view name, std::string_view contents) {
  return Blame(name, env_->WriteFileAtomically(File(name), contents));
}

absl::Status StagedDir::Blame(absl::string_view name, const absl::Status& status) const {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(dir_, ": writing ", name, ": ", status.message()));
}

absl::Status StagedDir::Commit() {
  if (absl::Status s = env_->Sync(tmp_); !s.ok()) return s;
  if (absl::Status s = env_->Rename(tmp_, dir_); !s.ok()) return s;
  tmp_.clear();
  const size_t slash = dir_.find_last_of('/');
  return env_->Sync(slash == std::string::npos ? "." : dir_.substr(0, slash + 1));
}

}  // namespace trellis::model
