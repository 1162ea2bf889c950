#ifndef TRELLIS_CONFIG_FIELD_TEXT_H_
#define TRELLIS_CONFIG_FIELD_TEXT_H_

// One field of a config message from text, read as a job file's YAML value
// is (config/job_config.h): for flags such as `trellis verify --config
// KEY=VALUE`, so that a flag takes what a job file takes.

#include <string>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace trellis::config {

// Sets the scalar field `f` of `message` from `text` (appends when `f` is
// repeated): numbers (.inf, .nan), true or false, a choice by its name in
// any case (config/choice.h), a string as it is. InvalidArgument saying
// what was expected and what was found; a field that is a message is
// refused.
[[nodiscard]] absl::Status SetFieldText(const std::string& text,
                                        const google::protobuf::FieldDescriptor* f,
                                        google::protobuf::Message* message);

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_FIELD_TEXT_H_
