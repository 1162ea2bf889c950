#include "observe/job_params.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "config/choice.h"
#include "google/protobuf/descriptor.h"

namespace trellis::observe {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Item `i` of repeated `f`, or the singular `f` when `i` is -1.
std::string Value(const Message& m, const FieldDescriptor* f, int i) {
  const Reflection* r = m.GetReflection();
  const bool rep = i >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(rep ? r->GetRepeatedInt32(m, f, i) : r->GetInt32(m, f));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(rep ? r->GetRepeatedInt64(m, f, i) : r->GetInt64(m, f));
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(rep ? r->GetRepeatedUInt32(m, f, i) : r->GetUInt32(m, f));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(rep ? r->GetRepeatedUInt64(m, f, i) : r->GetUInt64(m, f));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return absl::StrCat(rep ? r->GetRepeatedDouble(m, f, i) : r->GetDouble(m, f));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return absl::StrCat(rep ? r->GetRepeatedFloat(m, f, i) : r->GetFloat(m, f));
    case FieldDescriptor::CPPTYPE_BOOL:
      return (rep ? r->GetRepeatedBool(m, f, i) : r->GetBool(m, f)) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return config::ChoiceName(rep ? r->GetRepeatedEnum(m, f, i) : r->GetEnum(m, f));
    case FieldDescriptor::CPPTYPE_STRING:
      return rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f);
    case FieldDescriptor::CPPTYPE_MESSAGE: break;
  }
  return "";
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
