// JobConfig → YAML with every field present (its value or its declared
// default), in declaration order. Generic over the descriptor.
//
// Proto comments are not emitted: the descriptors compiled into the binary
// carry no source info. job.proto documents each field.

#include <string>

#include "absl/strings/str_cat.h"
#include "config/internal/scalars.h"
#include "config/job_config.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace trellis::config {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

void EmitMessage(const Message& msg, int indent, std::string* out);

// The body of a message value: a nested block, or "{}" when it has no fields.
void EmitNested(const Message& sub, const std::string& head, int indent,
                std::string* out) {
  if (sub.GetDescriptor()->field_count() == 0) {
    absl::StrAppend(out, head, " {}\n");
    return;
  }
  absl::StrAppend(out, head, "\n");
  EmitMessage(sub, indent, out);
}

void EmitField(const Message& msg, const FieldDescriptor* f, int indent,
               std::string* out) {
  const auto* r = msg.GetReflection();
  const std::string pad(indent, ' ');
  const std::string head = absl::StrCat(pad, f->name(), ":");
  const bool is_msg = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
  if (!f->is_repeated()) {
    if (is_msg) {
      EmitNested(r->GetMessage(msg, f), head, indent + 2, out);
    } else {
      absl::StrAppend(out, head, " ", internal::ScalarText(msg, f, -1), "\n");
    }
    return;
  }
  const int n = r->FieldSize(msg, f);
  if (n == 0) {
    absl::StrAppend(out, head, " []\n");
    return;
  }
  absl::StrAppend(out, head, "\n");
  for (int i = 0; i < n; ++i) {
    if (is_msg) {
      EmitNested(r->GetRepeatedMessage(msg, f, i), pad + "  -", indent + 4, out);
    } else {
      absl::StrAppend(out, pad, "  - ", internal::ScalarText(msg, f, i), "\n");
    }
  }
}

void EmitMessage(const Message& msg, int indent, std::string* out) {
  const Descriptor* d = msg.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) EmitField(msg, d->field(i), indent, out);
}

}  // namespace

std::string ResolvedJobYaml(const v1::JobConfig& job) {
  std::string out =
      "# Resolved job: every field with its value or default (see "
      "proto/trellis/v1/job.proto).\n";
  EmitMessage(job, 0, &out);
  return out;
}

}  // namespace trellis::config
