// Tests, string and dict methods, global functions and the helpers the
// filters share (filters.cc holds the filters).

#include "jinja/builtins.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "jinja/status_macros.h"

namespace trellis::jinja::internal {
namespace {

// Python's str.isspace() code points.
bool IsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

using MethodTable = absl::flat_hash_map<std::string, FilterFn>;

Value Str(std::string s) { return Value(Json(std::move(s))); }
const std::string& Self(const Value& v) { return v.json().get_ref<const std::string&>(); }

// Python's str.split(sep=None, maxsplit=-1).
absl::StatusOr<Value> Split(const Value& self, const CallArgs& args) {
  const Value* sep = Arg(args, 0, "sep");
  const Value* max_arg = Arg(args, 1, "maxsplit");
  int64_t maxsplit = max_arg && max_arg->is_number() ? max_arg->json().get<int64_t>() : -1;
  const std::string& s = Self(self);
  Json out = Json::array();
  if (sep && !sep->is_none()) {
    if (!sep->is_string() || Self(*sep).empty()) return absl::InvalidArgumentError("split needs a non-empty separator");
    const std::string& by = Self(*sep);
    size_t start = 0;
    for (size_t at; maxsplit != 0 && (at = s.find(by, start)) != std::string::npos; --maxsplit) {
      out.push_back(s.substr(start, at - start));
      start = at + by.size();
    }
    out.push_back(s.substr(start));
    return Value(std::move(out));
  }
  const std::u32string text = DecodeUtf8(s);
  size_t i = 0;
  while (true) {
    while (i < text.size() && IsSpace(text[i])) ++i;
    if (i == text.size()) break;
    if (maxsplit == 0) {
      size_t end = text.size();
      while (end > i && IsSpace(text[end - 1])) --end;
      out.push_back(EncodeUtf8(text.substr(i, end - i)));
      break;
    }
    size_t end = i;
    while (end < text.size() && !IsSpace(text[end])) ++end;
    out.push_back(EncodeUtf8(text.substr(i, end - i)));
    i = end;
    --maxsplit;
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> Affix(const Value& self, const CallArgs& args, bool prefix) {
  const Value* arg = Arg(args, 0, "");
  if (!arg) return absl::InvalidArgumentError("needs an argument");
  std::vector<Json> options;
  if (arg->is_list()) {
    options.assign(arg->json().begin(), arg->json().end());
  } else {
    options.push_back(arg->is_json() ? arg->json() : Json());
  }
  for (const Json& o : options) {
    if (!o.is_string()) return absl::InvalidArgumentError("needs a string or a list of strings");
    const std::string& affix = o.get_ref<const std::string&>();
    if (prefix ? absl::StartsWith(Self(self), affix) : absl::EndsWith(Self(self), affix)) {
      return Value(Json(true));
    }
  }
  return Value(Json(false));
}

// ASCII letters change case; other characters are kept.
std::string Title(const std::string& s, bool every_word) {
  std::string out = s;
  bool after_cased = false;
  bool seen_first = false;
  for (char& c : out) {
    const bool letter = absl::ascii_isalpha(static_cast<unsigned char>(c));
    const bool upper = every_word ? !after_cased : !seen_first;
    c = upper ? absl::ascii_toupper(static_cast<unsigned char>(c))
              : absl::ascii_tolower(static_cast<unsigned char>(c));
    after_cased = letter;
    seen_first = true;
  }
  return out;
}

absl::StatusOr<Value> Replace(const Value& self, const CallArgs& args) {
  JINJA_ASSIGN_OR_RETURN(std::string from, StringArg(args, 0, "old", ""));
  JINJA_ASSIGN_OR_RETURN(std::string to, StringArg(args, 1, "new", ""));
  if (from.empty()) return absl::InvalidArgumentError("replace of an empty string is not supported");
  const Value* count_arg = Arg(args, 2, "count");
  int64_t count = count_arg && count_arg->is_number() ? count_arg->json().get<int64_t>() : -1;
  const std::string& s = Self(self);
  std::string out;
  size_t start = 0;
  for (size_t at; count != 0 && (at = s.find(from, start)) != std::string::npos; --count) {
    absl::StrAppend(&out, s.substr(start, at - start), to);
    start = at + from.size();
  }
  return Str(out + s.substr(start));
}

const MethodTable& StringMethods() {
  static const auto* const kMethods = new MethodTable{
      {"strip", [](const Value& s, const CallArgs& a) -> absl::StatusOr<Value> {
         return Str(Strip(Self(s), Arg(a, 0, "chars"), StripSide::kBoth));
       }},
      {"lstrip", [](const Value& s, const CallArgs& a) -> absl::StatusOr<Value> {
         return Str(Strip(Self(s), Arg(a, 0, "chars"), StripSide::kLeft));
       }},
      {"rstrip", [](const Value& s, const CallArgs& a) -> absl::StatusOr<Value> {
         return Str(Strip(Self(s), Arg(a, 0, "chars"), StripSide::kRight));
       }},
      {"upper", [](const Value& s, const CallArgs&) -> absl::StatusOr<Value> {
         return Str(absl::AsciiStrToUpper(Self(s)));
       }},
      {"lower", [](const Value& s, const CallArgs&) -> absl::StatusOr<Value> {
         return Str(absl::AsciiStrToLower(Self(s)));
       }},
      {"title", [](const Value& s, const CallArgs&) -> absl::StatusOr<Value> { return Str(Title(Self(s), true)); }},
      {"capitalize", [](const Value& s, const CallArgs&) -> absl::StatusOr<Value> {
         return Str(Title(Self(s), false));
       }},
      {"startswith", [](const Value& s, const CallArgs& a) { return Affix(s, a, true); }},
      {"endswith", [](const Value& s, const CallArgs& a) { return Affix(s, a, false); }},
      {"split", Split},
      {"replace", Replace},
      {"join", [](const Value& s, const CallArgs& a) -> absl::StatusOr<Value> {
         const Value* items = Arg(a, 0, "");
         if (!items) return absl::InvalidArgumentError("join needs a list");
         JINJA_ASSIGN_OR_RETURN(std::vector<Json> list, Iterate(*items));
         std::vector<std::string> parts;
         for (const Json& j : list) parts.push_back(ToPrintString(Value(j)));
         return Str(absl::StrJoin(parts, Self(s)));
       }},
  };
  return *kMethods;
}

const MethodTable& DictMethods() {
  static const auto* const kMethods = new MethodTable{
      {"items", [](const Value& d, const CallArgs&) -> absl::StatusOr<Value> {
         Json out = Json::array();
         for (const auto& [k, v] : d.json().items()) out.push_back(Json::array({k, v}));
         return Value(std::move(out));
       }},
      {"keys", [](const Value& d, const CallArgs&) -> absl::StatusOr<Value> {
         Json out = Json::array();
         for (const auto& item : d.json().items()) out.push_back(item.key());
         return Value(std::move(out));
       }},
      {"values", [](const Value& d, const CallArgs&) -> absl::StatusOr<Value> {
         Json out = Json::array();
         for (const auto& item : d.json().items()) out.push_back(item.value());
         return Value(std::move(out));
       }},
      {"get", [](const Value& d, const CallArgs& a) -> absl::StatusOr<Value> {
         JINJA_ASSIGN_OR_RETURN(std::string key, StringArg(a, 0, "key", ""));
         auto it = d.json().find(key);
         if (it != d.json().end()) return Value(*it);
         const Value* fallback = Arg(a, 1, "default");
         return fallback ? *fallback : Value(Json());
       }},
  };
  return *kMethods;
}

bool IsInt(const Value& v) { return v.is_json() && v.json().is_number_integer(); }

absl::StatusOr<bool> Divisible(const Value& v, int64_t by, int64_t rem) {
  if (!IsInt(v)) return absl::InvalidArgumentError(absl::StrCat("expects an integer, got ", v.KindName()));
  const int64_t r = v.json().get<int64_t>() % by;
  return r == rem || r == -rem;
}

TestFn Compare(std::function<bool(const Value&, const Value&)> op) {
  return [op](const Value& s, const CallArgs& a) -> absl::StatusOr<bool> {
    const Value* other = Arg(a, 0, "other");
    if (!other) return absl::InvalidArgumentError("needs a value to compare with");
    return op(s, *other);
  };
}

TestFn Order(bool less, bool or_equal) {
  return [less, or_equal](const Value& s, const CallArgs& a) -> absl::StatusOr<bool> {
    const Value* other = Arg(a, 0, "other");
    if (!other) return absl::InvalidArgumentError("needs a value to compare with");
    if (or_equal && Equal(s, *other)) return true;
    return less ? Less(s, *other) : Less(*other, s);
  };
}

TestFn Kind(std::function<bool(const Value&)> pred) {
  return [pred](const Value& s, const CallArgs&) -> absl::StatusOr<bool> { return pred(s); };
}

}  // namespace

const absl::flat_hash_map<std::string, TestFn>& Tests() {
  static const auto* const kTests = new absl::flat_hash_map<std::string, TestFn>{
      {"defined", Kind([](const Value& v) { return !v.is_undefined(); })},
      {"undefined", Kind([](const Value& v) { return v.is_undefined(); })},
      {"none", Kind([](const Value& v) { return v.is_none(); })},
      {"string", Kind([](const Value& v) { return v.is_string(); })},
      {"mapping", Kind([](const Value& v) { return v.is_dict(); })},
      {"sequence", Kind([](const Value& v) { return v.is_string() || v.is_list() || v.is_dict(); })},
      {"iterable", Kind([](const Value& v) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       })},
      {"number", Kind([](const Value& v) { return v.is_json() && (v.json().is_number() || v.json().is_boolean()); })},
      {"integer", Kind(IsInt)},
      {"float", Kind([](const Value& v) { return v.is_json() && v.json().is_number_float(); })},
      {"boolean", Kind([](const Value& v) { return v.is_json() && v.json().is_boolean(); })},
      {"true", Kind([](const Value& v) { return v.is_json() && v.json() == Json(true); })},
      {"false", Kind([](const Value& v) { return v.is_json() && v.json() == Json(false); })},
      {"callable", Kind([](const Value& v) { return v.is_callable(); })},
      {"odd", [](const Value& v, const CallArgs&) { return Divisible(v, 2, 1); }},
      {"even", [](const Value& v, const CallArgs&) { return Divisible(v, 2, 0); }},
      {"equalto", Compare(Equal)},
      {"eq", Compare(Equal)},
      {"==", Compare(Equal)},
      {"ne", Compare([](const Value& a, const Value& b) { return !Equal(a, b); })},
      {"!=", Compare([](const Value& a, const Value& b) { return !Equal(a, b); })},
      {"lt", Order(true, false)},
      {"le", Order(true, true)},
      {"gt", Order(false, false)},
      {"ge", Order(false, true)},
      {"in", [](const Value& v, const CallArgs& a) -> absl::StatusOr<bool> {
         const Value* seq = Arg(a, 0, "seq");
         if (!seq) return absl::InvalidArgumentError("needs a container");
         if (seq->is_string()) return v.is_string() && absl::StrContains(Self(*seq), Self(v));
         if (seq->is_dict()) return v.is_string() && seq->json().contains(Self(v));
         JINJA_ASSIGN_OR_RETURN(std::vector<Json> items, Iterate(*seq));
         for (const Json& item : items) {
           if (Equal(v, Value(item))) return true;
         }
         return false;
       }},
  };
  return *kTests;
}

const FilterFn* FindMethod(const Value& self, absl::string_view name) {
  const MethodTable* table = self.is_string() ? &StringMethods() : self.is_dict() ? &DictMethods() : nullptr;
  if (!table) return nullptr;
  auto it = table->find(name);
  return it == table->end() ? nullptr : &it->second;
}

std::map<std::string, Value> BuiltinGlobals() {
  std::map<std::string, Value> globals;
  globals["namespace"] = MakeFunction([](const CallArgs& args) -> absl::StatusOr<Value> {
    auto ns = std::make_shared<Namespace>();
    for (const Value& init : args.positional) {
      if (!init.is_dict()) return absl::InvalidArgumentError("namespace() takes a dict or names=values");
      for (const auto& [k, v] : init.json().items()) ns->attrs[k] = Value(v);
    }
    for (const auto& [k, v] : args.keyword) ns->attrs[k] = v;
    return Value(std::move(ns));
  });
  globals["dict"] = MakeFunction([](const CallArgs& args) -> absl::StatusOr<Value> {
    Json out = Json::object();
    for (const auto& [k, v] : args.keyword) {
      if (!v.is_json()) return absl::InvalidArgumentError(absl::StrCat("dict(): ", k, " is ", v.KindName()));
      out[k] = v.json();
    }
    return Value(std::move(out));
  });
  globals["range"] = MakeFunction([](const CallArgs& args) -> absl::StatusOr<Value> {
    std::vector<int64_t> n;
    for (const Value& v : args.positional) {
      if (!IsInt(v)) return absl::InvalidArgumentError("range() takes integers");
      n.push_back(v.json().get<int64_t>());
    }
    if (n.empty() || n.size() > 3 || (n.size() == 3 && n[2] == 0)) {
      return absl::InvalidArgumentError("range() takes 1 to 3 integers, the step not 0");
    }
    const int64_t start = n.size() == 1 ? 0 : n[0];
    const int64_t stop = n.size() == 1 ? n[0] : n[1];
    const int64_t step = n.size() == 3 ? n[2] : 1;
    Json out = Json::array();
    for (int64_t i = start; (step > 0 ? i < stop : i > stop) && out.size() < 100000; i += step) out.push_back(i);
    return Value(std::move(out));
  });
  return globals;
}

const Value* Arg(const CallArgs& args, size_t index, absl::string_view name) {
  if (index < args.positional.size()) return &args.positional[index];
  for (const auto& [key, value] : args.keyword) {
    if (key == name) return &value;
  }
  return nullptr;
}

absl::StatusOr<std::string> StringArg(const CallArgs& args, size_t index, absl::string_view name,
                                      absl::string_view fallback) {
  const Value* v = Arg(args, index, name);
  if (!v) return std::string(fallback);
  if (!v->is_string()) return absl::InvalidArgumentError(absl::StrCat("expects a string, got ", v->KindName()));
  return Self(*v);
}

std::string Strip(absl::string_view s, const Value* chars, StripSide side) {
  const std::u32string text = DecodeUtf8(s);
  const bool by_set = chars && chars->is_string();
  const std::u32string set = by_set ? DecodeUtf8(Self(*chars)) : std::u32string();
  auto strip = [&](char32_t c) { return by_set ? set.find(c) != std::u32string::npos : IsSpace(c); };
  size_t begin = 0;
  size_t end = text.size();
  if (side != StripSide::kRight) {
    while (begin < end && strip(text[begin])) ++begin;
  }
  if (side != StripSide::kLeft) {
    while (end > begin && strip(text[end - 1])) --end;
  }
  return EncodeUtf8(std::u32string_view(text).substr(begin, end - begin));
}

absl::StatusOr<std::vector<Json>> Iterate(const Value& v) {
  if (v.is_undefined()) return std::vector<Json>();
  if (v.is_list()) return std::vector<Json>(v.json().begin(), v.json().end());
  if (v.is_dict()) {
    std::vector<Json> keys;
    for (const auto& item : v.json().items()) keys.push_back(item.key());
    return keys;
  }
  if (v.is_string()) {
    std::vector<Json> chars;
    for (char32_t c : DecodeUtf8(Self(v))) chars.push_back(EncodeUtf8(std::u32string(1, c)));
    return chars;
  }
  return absl::InvalidArgumentError(absl::StrCat(v.KindName(), " is not iterable"));
}

}  // namespace trellis::jinja::internal
