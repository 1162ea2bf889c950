#include "observe/job_params.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "config/internal/scalars.h"
#include "google/protobuf/descriptor.h"

namespace trellis::observe {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Item `i` of repeated `f`, or the singular `f` when `i` is -1: as the
// resolved job.yaml writes it, strings unquoted.
std::string Value(const Message& m, const FieldDescriptor* f, int i) {
  if (f->cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
    return config::internal::ScalarText(m, f, i);
  }
  const Reflection* r = m.GetReflection();
  return i >= 0 ? r->GetRepeatedString(m, f, i) : r->GetString(m, f);
}

void Walk(const Message& m, const std::string& prefix, std::vector<MlflowParam>* out) {
  const Reflection* r = m.GetReflection();
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    const std::string path = prefix + std::string(f->name());
    const bool message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (!f->is_repeated()) {
      if (message) {
        Walk(r->GetMessage(m, f), path + ".", out);
      } else {
        out->emplace_back(path, Value(m, f, -1));
      }
      continue;
    }
    const int n = r->FieldSize(m, f);
    if (message) {
      for (int i = 0; i < n; ++i)
        Walk(r->GetRepeatedMessage(m, f, i), absl::StrCat(path, ".", i, "."), out);
      continue;
    }
    std::string joined;
    for (int i = 0; i < n; ++i) absl::StrAppend(&joined, i > 0 ? "," : "", Value(m, f, i));
    out->emplace_back(path, joined);
  }
}

}  // namespace

std::vector<MlflowParam> JobParams(const Message& job) {
  std::vector<MlflowParam> params;
  Walk(job, "", &params);
  for (auto& [key, value] : params) {
    if (value.size() > kMaxParamValue) value.resize(kMaxParamValue);
  }
  return params;
}

}  // namespace trellis::observe
