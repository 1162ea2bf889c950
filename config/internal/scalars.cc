#include "config/internal/scalars.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "config/choice.h"
#include "config/printable.h"

namespace trellis::config::internal {
namespace {

using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Optional sign, then one or more digits and nothing else.
bool LooksIntegral(absl::string_view s) {
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  return !s.empty() && std::all_of(s.begin(), s.end(), absl::ascii_isdigit);
}

absl::Status NotA(absl::string_view expected, absl::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat("expected ", expected, ", found ", Quote(text)));
}

template <typename T>
absl::Status ParseInt(const std::string& text, T* out) {
  const std::string s(absl::StripAsciiWhitespace(text));
  if (!LooksIntegral(s)) return NotA("an integer", s);
  constexpr bool kUnsigned = !std::numeric_limits<T>::is_signed;
  if (kUnsigned && s[0] == '-') {
    if (s.find_first_not_of("-0") == std::string::npos) {  // "-0"
      *out = 0;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("expected a non-negative integer, found ", s));
  }
  if (absl::SimpleAtoi(s, out)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "expected an integer in [", std::numeric_limits<T>::min(), ", ",
      std::numeric_limits<T>::max(), "], found ", s));
}

absl::Status ParseDouble(const std::string& text, double* out) {
  const std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (s == ".inf" || s == "+.inf") {
    *out = std::numeric_limits<double>::infinity();
  } else if (s == "-.inf") {
    *out = -std::numeric_limits<double>::infinity();
  } else if (s == ".nan") {
    *out = std::numeric_limits<double>::quiet_NaN();
  } else if (!absl::SimpleAtod(s, out)) {
    return NotA("a number", text);
  }
  return absl::OkStatus();
}

absl::Status ParseFloat(const std::string& text, float* out) {
  double d = 0;
  absl::Status s = ParseDouble(text, &d);
  if (!s.ok()) return s;
  if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a number within float range, found ", text));
  }
  // Parse again as float: rounding through double could differ by one ulp.
  if (!std::isfinite(d) || !absl::SimpleAtof(absl::StripAsciiWhitespace(text), out)) {
    *out = static_cast<float>(d);
  }
  return absl::OkStatus();
}

absl::Status ParseBool(const std::string& text, bool* out) {
  const std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (s == "true" || s == "yes" || s == "on") {
    *out = true;
  } else if (s == "false" || s == "no" || s == "off") {
    *out = false;
  } else {
    return NotA("true or false", text);
  }
  return absl::OkStatus();
}

absl::Status ParseEnum(const std::string& text, const EnumDescriptor* e,
                       const EnumValueDescriptor** out) {
  *out = FindChoice(e, text);
  return *out != nullptr ? absl::OkStatus() : NotA(ChoiceList(e), text);
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

#define TRELLIS_SET(Type, value) \
  (rep ? r->Add##Type(msg, f, value) : r->Set##Type(msg, f, value))

absl::Status SetScalar(const std::string& text, const FieldDescriptor* f, Message* msg) {
  const auto* r = msg->GetReflection();
  const bool rep = f->is_repeated();
  absl::Status s;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v = 0;
      if ((s = ParseInt(text, &v)).ok()) TRELLIS_SET(Int32, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v = 0;
      if ((s = ParseInt(text, &v)).ok()) TRELLIS_SET(Int64, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v = 0;
      if ((s = ParseInt(text, &v)).ok()) TRELLIS_SET(UInt32, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v = 0;
      if ((s = ParseInt(text, &v)).ok()) TRELLIS_SET(UInt64, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_FLOAT: {
      float v = 0;
      if ((s = ParseFloat(text, &v)).ok()) TRELLIS_SET(Float, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double v = 0;
      if ((s = ParseDouble(text, &v)).ok()) TRELLIS_SET(Double, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool v = false;
      if ((s = ParseBool(text, &v)).ok()) TRELLIS_SET(Bool, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      const EnumValueDescriptor* v = nullptr;
      if ((s = ParseEnum(text, f->enum_type(), &v)).ok()) TRELLIS_SET(Enum, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      TRELLIS_SET(String, text);
      break;
    default:
      s = absl::InvalidArgumentError(absl::StrCat("cannot read ", TypeName(f), " from YAML"));
  }
  return s;
}

#undef TRELLIS_SET

std::string ScalarText(const Message& msg, const FieldDescriptor* f, int index) {
  const auto* r = msg.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(rep ? r->GetRepeatedInt32(msg, f, index) : r->GetInt32(msg, f));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(rep ? r->GetRepeatedInt64(msg, f, index) : r->GetInt64(msg, f));
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(rep ? r->GetRepeatedUInt32(msg, f, index) : r->GetUInt32(msg, f));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(rep ? r->GetRepeatedUInt64(msg, f, index) : r->GetUInt64(msg, f));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return FloatText(rep ? r->GetRepeatedFloat(msg, f, index) : r->GetFloat(msg, f));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return DoubleText(rep ? r->GetRepeatedDouble(msg, f, index) : r->GetDouble(msg, f));
    case FieldDescriptor::CPPTYPE_BOOL:
      return (rep ? r->GetRepeatedBool(msg, f, index) : r->GetBool(msg, f)) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return ChoiceName(rep ? r->GetRepeatedEnum(msg, f, index) : r->GetEnum(msg, f));
    case FieldDescriptor::CPPTYPE_STRING:
      return Quote(rep ? r->GetRepeatedString(msg, f, index) : r->GetString(msg, f),
                   std::string::npos);
    default:
      return "null";
  }
}

std::string TypeName(const FieldDescriptor* f) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64: return "an integer";
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64: return "a non-negative integer";
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE: return "a number";
    case FieldDescriptor::CPPTYPE_BOOL: return "true or false";
    case FieldDescriptor::CPPTYPE_ENUM: return ChoiceList(f->enum_type());
    case FieldDescriptor::CPPTYPE_STRING: return "a string";
    default: return "a map";
  }
}

std::string FloatText(float v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  std::string s;
  for (int digits = 6; digits <= 9; ++digits) {
    s = absl::StrFormat("%.*g", digits, v);
    float back = 0;
    if (absl::SimpleAtof(s, &back) && back == v) break;
  }
  return s;
}

std::string DoubleText(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  std::string s;
  for (int digits = 15; digits <= 17; ++digits) {
    s = absl::StrFormat("%.*g", digits, v);
    double back = 0;
    if (absl::SimpleAtod(s, &back) && back == v) break;
  }
  return s;
}

std::string Quote(absl::string_view s, size_t max_len) {
  const bool cut = s.size() > max_len;
  const std::string escaped =
      absl::StrReplaceAll(cut ? s.substr(0, max_len) : s, {{"\\", "\\\\"}, {"\"", "\\\""}});
  return absl::StrCat("\"", Printable(escaped), cut ? "...\"" : "\"");
}

std::string ClosestName(absl::string_view name, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = 3;
  for (const std::string& n : names) {
    const size_t d = EditDistance(absl::AsciiStrToLower(name), n);
    if (d < best_d) best_d = d, best = n;
  }
  return best;
}

}  // namespace trellis::config::internal
