// The text of a job's strings (config/internal/limits.h CheckStrings):
// names, paths and addresses hold no control characters, and no string a
// NUL, which would cut a path short where it is opened.

#include <string>

#include "absl/strings/str_cat.h"
#include "config/internal/limits.h"
#include "config/internal/scalars.h"
#include "config/printable.h"
#include "google/protobuf/descriptor.h"

namespace trellis::config::internal {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Strings that are text, not names: a pattern, commands and scripts, the
// string that ends a turn, an environment's options. They may hold tabs
// and line breaks.
bool IsText(const std::string& path) {
  for (const char* text : {"verifier.pattern", "verifier.command", "environment.command",
                           "environment.turn_stop", "environment.options_json"}) {
    if (path.rfind(text, 0) == 0) return true;
  }
  return false;
}

void CheckString(const std::string& path, const std::string& value, Checker& c) {
  const bool text = IsText(path);
  const size_t at = FirstControl(value, text ? "\t\n\r" : "");
  if (at == std::string::npos) return;
  c.Require(false, path,
            text ? "free of control characters other than tab and line breaks"
                 : "free of control characters (a name, path or address)",
            absl::StrCat(Quote(value), " (", Printable(value.substr(at, 1)), " at byte ", at,
                         ")"));
}

void CheckMessage(const Message& msg, const std::string& prefix, Checker& c) {
  const auto* d = msg.GetDescriptor();
  const auto* r = msg.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string path = absl::StrCat(prefix, f->name());
    const bool message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (!message && f->cpp_type() != FieldDescriptor::CPPTYPE_STRING) continue;
    if (!f->is_repeated()) {
      if (message) {
        if (r->HasField(msg, f)) CheckMessage(r->GetMessage(msg, f), path + ".", c);
      } else {
        CheckString(path, r->GetString(msg, f), c);
      }
      continue;
    }
    for (int k = 0; k < r->FieldSize(msg, f); ++k) {
      const std::string item = absl::StrCat(path, "[", k, "]");
      if (message) {
        CheckMessage(r->GetRepeatedMessage(msg, f, k), item + ".", c);
      } else {
        CheckString(item, r->GetRepeatedString(msg, f, k), c);
      }
    }
  }
}

}  // namespace

void CheckStrings(const v1::JobConfig& job, Checker& c) { CheckMessage(job, "", c); }

}  // namespace trellis::config::internal
