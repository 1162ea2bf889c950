#ifndef TRELLIS_ENVIRONMENT_INTERNAL_OPTIONS_H_
#define TRELLIS_ENVIRONMENT_INTERNAL_OPTIONS_H_

// A built-in environment's options (environment.options_json): a JSON
// object whose keys the environment names; errors say which key of
// environment.options_json is wrong and what was expected.

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trellis/v1/job.pb.h"

namespace trellis::environment::internal {

class Options {
 public:
  // InvalidArgument when options_json is not a JSON object ("" is {}) or
  // has a key not in `known`.
  [[nodiscard]] static absl::StatusOr<Options> Parse(const v1::EnvironmentConfig& config,
                                                     std::initializer_list<const char*> known);

  // Sets *value to the option `key` when present (else leaves it: the
  // default); InvalidArgument when present with another type.
  [[nodiscard]] absl::Status Get(const char* key, int64_t* value) const;
  [[nodiscard]] absl::Status Get(const char* key, std::string* value) const;

 private:
  nlohmann::json j_;
};

}  // namespace trellis::environment::internal

#endif  // TRELLIS_ENVIRONMENT_INTERNAL_OPTIONS_H_
