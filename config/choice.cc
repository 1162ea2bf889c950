#include "config/choice.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trellis::config {

std::string ChoiceName(const google::protobuf::EnumValueDescriptor* value) {
  return absl::AsciiStrToLower(value->name());
}

const google::protobuf::EnumValueDescriptor* FindChoice(
    const google::protobuf::EnumDescriptor* type, absl::string_view text) {
  return type->FindValueByName(absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text)));
}

std::string ChoiceList(const google::protobuf::EnumDescriptor* type) {
  std::vector<std::string> names;
  for (int i = 0; i < type->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor* v = type->value(i);
    if (!absl::EndsWith(v->name(), "_UNSPECIFIED")) names.push_back(ChoiceName(v));
  }
  return absl::StrCat("one of ", absl::StrJoin(names, ", "));
}

}  // namespace trellis::config
