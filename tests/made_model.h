#ifndef TRELLIS_TESTS_MADE_MODEL_H_
#define TRELLIS_TESTS_MADE_MODEL_H_

#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "trellis/v1/job.pb.h"

namespace trellis::testing_util {

// Whether the job's model.path names a model made on demand (under models/,
// by scripts/real_model.sh) that is absent, relative to the working
// directory; such jobs are checked only where the model has been made.
inline bool ModelNotMade(const v1::JobConfig& job) {
  const std::string& model = job.model().path();
  return absl::StartsWith(model, "models/") &&
         !std::filesystem::exists(std::filesystem::path(model) / "config.json");
}

}  // namespace trellis::testing_util

#endif  // TRELLIS_TESTS_MADE_MODEL_H_
