#ifndef TRELLIS_CONFIG_CHOICE_H_
#define TRELLIS_CONFIG_CHOICE_H_

// A closed set of choices is a proto enum (job.proto); its values are
// spelled in lowercase wherever they are written: YAML, the resolved job,
// messages, ledger labels, checkpoint metadata. "adamw" is
// OptimizerConfig::ADAMW, "bf16" MemoryConfig::BF16, "learner" v1::LEARNER.
// Reading matches the value names in any case.

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/generated_enum_reflection.h"

namespace trellis::config {

// The value's name in lowercase.
std::string ChoiceName(const google::protobuf::EnumValueDescriptor* value);

// The value of `type` named `text` in any case (surrounding spaces
// ignored); null when there is none.
const google::protobuf::EnumValueDescriptor* FindChoice(
    const google::protobuf::EnumDescriptor* type, absl::string_view text);

// "one of a, b, c": the values a user may write (*_UNSPECIFIED is read but
// not offered).
std::string ChoiceList(const google::protobuf::EnumDescriptor* type);

template <typename E>
std::string ChoiceName(E value) {
  const google::protobuf::EnumValueDescriptor* v =
      google::protobuf::GetEnumDescriptor<E>()->FindValueByNumber(value);
  return v == nullptr ? std::to_string(static_cast<int>(value)) : ChoiceName(v);
}

template <typename E>
std::optional<E> ParseChoice(absl::string_view text) {
  const google::protobuf::EnumValueDescriptor* v =
      FindChoice(google::protobuf::GetEnumDescriptor<E>(), text);
  if (v == nullptr) return std::nullopt;
  return static_cast<E>(v->number());
}

template <typename E>
std::string ChoiceList() {
  return ChoiceList(google::protobuf::GetEnumDescriptor<E>());
}

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_CHOICE_H_
