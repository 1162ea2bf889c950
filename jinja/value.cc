#include "jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trellis::jinja {
namespace {

// Invalid UTF-8 bytes decode to U+DC80..U+DCFF (Python's surrogateescape)
// and encode back to the byte.
constexpr char32_t kEscapeBase = 0xDC00;

bool IsNumeric(const Json& j) { return j.is_number() || j.is_boolean(); }

double AsDouble(const Json& j) {
  if (j.is_boolean()) return j.get<bool>() ? 1.0 : 0.0;
  return j.get<double>();
}

bool BothIntegral(const Json& a, const Json& b) {
  return (a.is_number_integer() || a.is_boolean()) && (b.is_number_integer() || b.is_boolean());
}

int64_t AsInt(const Json& j) {
  if (j.is_boolean()) return j.get<bool>() ? 1 : 0;
  return j.get<int64_t>();
}

// Code points Python's str.isprintable() rejects beyond the C0 controls:
// C1 controls, no-break and other odd spaces, format characters, line and
// paragraph separators, and the escaped invalid bytes. (An approximation of
// the Unicode tables that covers what chat data holds.)
bool NonPrintable(char32_t c) {
  return c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD || (c >= 0x2000 && c <= 0x200F) ||
         (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F) || c == 0x3000 ||
         c == 0xFEFF || (c >= 0xD800 && c <= 0xDFFF);
}

std::string PythonStringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : DecodeUtf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (NonPrintable(c)) {
      out += c <= 0xFF ? absl::StrFormat("\\x%02x", static_cast<uint32_t>(c))
                       : absl::StrFormat("\\u%04x", static_cast<uint32_t>(c));
    } else {
      out += EncodeUtf8(std::u32string(1, c));
    }
  }
  out += quote;
  return out;
}

}  // namespace

bool Value::Truthy() const {
  if (is_undefined()) return false;
  if (!is_json()) return true;
  const Json& j = json();
  switch (j.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return j.get<bool>();
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return AsDouble(j) != 0.0;
    case Json::value_t::string:
      return !j.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
      return !j.empty();
    default:
      return true;
  }
}

std::string Value::KindName() const {
  if (is_undefined()) return "undefined";
  if (is_namespace()) return "namespace";
  if (is_callable()) return "function";
  const Json& j = json();
  if (j.is_null()) return "none";
  if (j.is_boolean()) return "bool";
  if (j.is_number_float()) return "float";
  if (j.is_number()) return "int";
  if (j.is_string()) return "string";
  if (j.is_array()) return "list";
  return "dict";
}

Value MakeFunction(Function fn) { return Value(std::make_shared<const Function>(std::move(fn))); }

std::string PythonFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::atoi(sci.c_str() + e + 1);
  const bool negative = mantissa[0] == '-';
  std::string digits;
  for (char c : mantissa) {
    if (c >= '0' && c <= '9') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    return out + absl::StrFormat("e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  if (exponent < 0) return out + "0." + std::string(-exponent - 1, '0') + digits;
  const size_t int_len = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

std::string PythonRepr(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "None";
    case Json::value_t::boolean:
      return j.get<bool>() ? "True" : "False";
    case Json::value_t::number_float:
      return PythonFloatRepr(j.get<double>());
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return j.dump();
    case Json::value_t::string:
      return PythonStringRepr(j.get<std::string>());
    case Json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < j.size(); ++i) absl::StrAppend(&out, i ? ", " : "", PythonRepr(j[i]));
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, value] : j.items()) {
        absl::StrAppend(&out, first ? "" : ", ", PythonStringRepr(key), ": ", PythonRepr(value));
        first = false;
      }
      return out + "}";
    }
    default:
      return j.dump();
  }
}

std::string ToPrintString(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_namespace()) return "<Namespace>";
  if (v.is_callable()) return "<function>";
  if (v.json().is_string()) return v.json().get<std::string>();
  return PythonRepr(v.json());
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (!a.is_json() || !b.is_json()) {
    if (a.is_namespace() && b.is_namespace()) return &a.ns() == &b.ns();
    return false;
  }
  const Json& x = a.json();
  const Json& y = b.json();
  if (IsNumeric(x) && IsNumeric(y)) {
    return BothIntegral(x, y) ? AsInt(x) == AsInt(y) : AsDouble(x) == AsDouble(y);
  }
  if (x.type() != y.type()) return false;
  if (x.is_array()) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!Equal(Value(x[i]), Value(y[i]))) return false;
    }
    return true;
  }
  if (x.is_object()) {
    if (x.size() != y.size()) return false;
    for (const auto& [key, value] : x.items()) {
      auto it = y.find(key);
      if (it == y.end() || !Equal(Value(value), Value(*it))) return false;
    }
    return true;
  }
  return x == y;
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_json() && b.is_json()) {
    const Json& x = a.json();
    const Json& y = b.json();
    if (IsNumeric(x) && IsNumeric(y)) {
      return BothIntegral(x, y) ? AsInt(x) < AsInt(y) : AsDouble(x) < AsDouble(y);
    }
    if (x.is_string() && y.is_string()) return x.get<std::string>() < y.get<std::string>();
    if (x.is_array() && y.is_array()) {
      for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
        if (Equal(Value(x[i]), Value(y[i]))) continue;
        return Less(Value(x[i]), Value(y[i]));
      }
      return x.size() < y.size();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot order ", a.KindName(), " and ", b.KindName()));
}

std::u32string DecodeUtf8(absl::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const int len = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3
                                      : (lead >> 3) == 0x1E ? 4 : 0;
    bool valid = len > 0 && i + len <= text.size();
    char32_t c = len == 1 ? lead : len == 2 ? (lead & 0x1F) : len == 3 ? (lead & 0x0F) : (lead & 0x07);
    for (int k = 1; valid && k < len; ++k) {
      const auto cont = static_cast<unsigned char>(text[i + k]);
      valid = (cont & 0xC0) == 0x80;
      c = (c << 6) | (cont & 0x3F);
    }
    if (!valid) {
      out += kEscapeBase + lead;
      ++i;
      continue;
    }
    out += c;
    i += len;
  }
  return out;
}

std::string EncodeUtf8(std::u32string_view text) {
  std::string out;
  for (char32_t c : text) {
    if (c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF) {
      out += static_cast<char>(c - kEscapeBase);
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

}  // namespace trellis::jinja
