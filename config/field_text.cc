#include "config/field_text.h"

#include "absl/strings/str_cat.h"
#include "config/internal/scalars.h"

namespace trellis::config {

absl::Status SetFieldText(const std::string& text, const google::protobuf::FieldDescriptor* f,
                          google::protobuf::Message* message) {
  if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a single value, but ", f->name(), " is a group of fields"));
  }
  return internal::SetScalar(text, f, message);
}

}  // namespace trellis::config
