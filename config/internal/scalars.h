#ifndef TRELLIS_CONFIG_INTERNAL_SCALARS_H_
#define TRELLIS_CONFIG_INTERNAL_SCALARS_H_

// Text ↔ protobuf scalar fields, shared by the YAML reader and writer.

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace trellis::config::internal {

// Parses `text` by the type of `f` and sets it on `msg` (appends when `f` is
// repeated). On failure returns InvalidArgument saying what was expected and
// what was found, without a location: the caller adds it. Enum names match
// case-insensitively; floats accept YAML's .inf / -.inf / .nan.
[[nodiscard]] absl::Status SetScalar(const std::string& text,
                                     const google::protobuf::FieldDescriptor* f,
                                     google::protobuf::Message* msg);

// Value `index` of `f` (-1: the singular field, or its default when unset)
// as YAML text that SetScalar reads back to the same value.
std::string ScalarText(const google::protobuf::Message& msg,
                       const google::protobuf::FieldDescriptor* f, int index);

// "an integer", "a number", "true or false", "one of A, B", "a string".
std::string TypeName(const google::protobuf::FieldDescriptor* f);

// Shortest decimal text that reads back to exactly `v`.
std::string FloatText(float v);
std::string DoubleText(double v);

// `s` in double quotes with YAML/C escapes, shortened when long.
std::string Quote(absl::string_view s, size_t max_len = 60);

// The name in `names` within edit distance 2 of `name` (nearest first), or "".
std::string ClosestName(absl::string_view name, const std::vector<std::string>& names);

}  // namespace trellis::config::internal

#endif  // TRELLIS_CONFIG_INTERNAL_SCALARS_H_
