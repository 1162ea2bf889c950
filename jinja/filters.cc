// The filters: Jinja2's built-ins that chat templates use, and tojson as
// transformers replaces it (json.dumps, no HTML escaping).

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "jinja/builtins.h"
#include "jinja/json_dumps.h"
#include "jinja/status_macros.h"

namespace trellis::jinja::internal {
namespace {

// Jinja2's attribute getter: "a.b.0" walks dict keys and list indices.
Value GetPath(const Json& item, absl::string_view path) {
  const Json* cur = &item;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    int index = 0;
    if (cur->is_object() && cur->contains(part)) {
      cur = &(*cur)[std::string(part)];
    } else if (cur->is_array() && absl::SimpleAtoi(part, &index) && index >= 0 &&
               static_cast<size_t>(index) < cur->size()) {
      cur = &(*cur)[static_cast<size_t>(index)];
    } else {
      return Undefined{absl::StrCat("no attribute '", part, "'")};
    }
  }
  return *cur;
}

absl::StatusOr<Json> ToJsonOrError(const Value& v, absl::string_view what) {
  if (v.is_json()) return v.json();
  return absl::InvalidArgumentError(absl::StrCat(what, " got ", v.KindName()));
}

// selectattr/rejectattr (by_attribute) and select/reject: keep the items
// whose test (default: truth) comes out `keep`.
absl::StatusOr<Value> Select(const Value& subject, const CallArgs& args, bool by_attribute,
                             bool keep) {
  JINJA_ASSIGN_OR_RETURN(std::vector<Json> items, Iterate(subject));
  std::string attribute;
  size_t next = 0;
  if (by_attribute) {
    JINJA_ASSIGN_OR_RETURN(attribute, StringArg(args, 0, "", ""));
    next = 1;
  }
  const TestFn* test = nullptr;
  CallArgs test_args;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) return absl::InvalidArgumentError("test name must be a string");
    const std::string name = args.positional[next].json().get<std::string>();
    auto it = Tests().find(name);
    if (it == Tests().end()) return absl::InvalidArgumentError(absl::StrCat("no test named '", name, "'"));
    test = &it->second;
    test_args.positional.assign(args.positional.begin() + static_cast<long>(next) + 1,
                                args.positional.end());
  }
  Json out = Json::array();
  for (const Json& item : items) {
    const Value subject_value = by_attribute ? GetPath(item, attribute) : Value(item);
    bool passed = subject_value.Truthy();
    if (test) {
      JINJA_ASSIGN_OR_RETURN(passed, (*test)(subject_value, test_args));
    }
    if (passed == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> Map(const Value& subject, const CallArgs& args) {
  JINJA_ASSIGN_OR_RETURN(std::vector<Json> items, Iterate(subject));
  Json out = Json::array();
  if (const Value* attribute = Arg(args, kKeywordOnly, "attribute")) {
    if (!attribute->is_string()) return absl::InvalidArgumentError("attribute must be a string");
    const Value* fallback = Arg(args, kKeywordOnly, "default");
    for (const Json& item : items) {
      Value v = GetPath(item, attribute->json().get<std::string>());
      if (v.is_undefined() && fallback) v = *fallback;
      JINJA_ASSIGN_OR_RETURN(Json j, ToJsonOrError(v, "map(attribute=...)"));
      out.push_back(std::move(j));
    }
    return Value(std::move(out));
  }
  JINJA_ASSIGN_OR_RETURN(std::string name, StringArg(args, 0, "", ""));
  auto it = Filters().find(name);
  if (it == Filters().end()) return absl::InvalidArgumentError(absl::StrCat("no filter named '", name, "'"));
  CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
  for (const Json& item : items) {
    JINJA_ASSIGN_OR_RETURN(Value v, it->second(Value(item), rest));
    JINJA_ASSIGN_OR_RETURN(Json j, ToJsonOrError(v, "map"));
    out.push_back(std::move(j));
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> ToJson(const Value& subject, const CallArgs& args) {
  JINJA_ASSIGN_OR_RETURN(Json j, ToJsonOrError(subject, "tojson"));
  DumpsOptions options;
  if (const Value* indent = Arg(args, 0, "indent"); indent && !indent->is_none()) {
    if (!indent->is_json() || !indent->json().is_number_integer()) {
      return absl::InvalidArgumentError("tojson's indent must be an integer");
    }
    options.indent = std::max(0, indent->json().get<int>());
  }
  if (const Value* ascii = Arg(args, kKeywordOnly, "ensure_ascii")) options.ensure_ascii = ascii->Truthy();
  if (const Value* sort = Arg(args, kKeywordOnly, "sort_keys")) options.sort_keys = sort->Truthy();
  if (const Value* seps = Arg(args, kKeywordOnly, "separators"); seps && !seps->is_none()) {
    if (!seps->is_list() || seps->json().size() != 2 || !seps->json()[0].is_string() ||
        !seps->json()[1].is_string()) {
      return absl::InvalidArgumentError("tojson's separators must be two strings");
    }
    options.separators.emplace(seps->json()[0].get<std::string>(), seps->json()[1].get<std::string>());
  }
  return Value(Json(JsonDumps(j, options)));
}

absl::StatusOr<Value> Join(const Value& subject, const CallArgs& args) {
  JINJA_ASSIGN_OR_RETURN(std::vector<Json> items, Iterate(subject));
  JINJA_ASSIGN_OR_RETURN(std::string sep, StringArg(args, 0, "d", ""));
  const Value* attribute = Arg(args, 1, "attribute");
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    const Value v = attribute && attribute->is_string()
                        ? GetPath(items[i], attribute->json().get<std::string>())
                        : Value(items[i]);
    absl::StrAppend(&out, i ? sep : "", ToPrintString(v));
  }
  return Value(Json(std::move(out)));
}

absl::StatusOr<Value> Length(const Value& subject, const CallArgs&) {
  if (subject.is_undefined()) return Value(Json(0));
  if (subject.is_string()) return Value(Json(DecodeUtf8(subject.json().get<std::string>()).size()));
  if (subject.is_list() || subject.is_dict()) return Value(Json(subject.json().size()));
  return absl::InvalidArgumentError(absl::StrCat(subject.KindName(), " has no length"));
}

absl::StatusOr<Value> Ends(const Value& subject, bool first) {
  JINJA_ASSIGN_OR_RETURN(std::vector<Json> items, Iterate(subject));
  if (items.empty()) return Value(Undefined{"empty sequence"});
  return Value(first ? items.front() : items.back());
}

absl::StatusOr<Value> Default(const Value& subject, const CallArgs& args) {
  const Value* boolean = Arg(args, 1, "boolean");
  const bool use_default = subject.is_undefined() || (boolean && boolean->Truthy() && !subject.Truthy());
  if (!use_default) return subject;
  const Value* fallback = Arg(args, 0, "default_value");
  return fallback ? *fallback : Value(Json(""));
}

absl::StatusOr<Value> ToInt(const Value& subject, const CallArgs& args) {
  const Value* fallback = Arg(args, 0, "default");
  const Value otherwise = fallback ? *fallback : Value(Json(0));
  if (!subject.is_json()) return otherwise;
  const Json& j = subject.json();
  if (j.is_boolean()) return Value(Json(j.get<bool>() ? 1 : 0));
  if (j.is_number_float()) return Value(Json(static_cast<int64_t>(std::trunc(j.get<double>()))));
  if (j.is_number()) return subject;
  int64_t parsed = 0;
  double as_double = 0;
  if (j.is_string()) {
    const std::string s(absl::StripAsciiWhitespace(j.get<std::string>()));
    if (absl::SimpleAtoi(s, &parsed)) return Value(Json(parsed));
    if (absl::SimpleAtod(s, &as_double) && std::isfinite(as_double)) {
      return Value(Json(static_cast<int64_t>(std::trunc(as_double))));
    }
  }
  return otherwise;
}

absl::StatusOr<Value> Items(const Value& subject, const CallArgs&) {
  if (subject.is_undefined()) return Value(Json::array());
  if (!subject.is_dict()) return absl::InvalidArgumentError(absl::StrCat("items of ", subject.KindName()));
  Json out = Json::array();
  for (const auto& [key, value] : subject.json().items()) out.push_back(Json::array({key, value}));
  return Value(std::move(out));
}

absl::StatusOr<Value> Reverse(const Value& subject, const CallArgs&) {
  if (subject.is_string()) {
    std::u32string s = DecodeUtf8(subject.json().get<std::string>());
    std::reverse(s.begin(), s.end());
    return Value(Json(EncodeUtf8(s)));
  }
  JINJA_ASSIGN_OR_RETURN(std::vector<Json> items, Iterate(subject));
  std::reverse(items.begin(), items.end());
  return Value(Json(std::move(items)));
}

FilterFn ViaMethod(absl::string_view name) {
  return [name = std::string(name)](const Value& subject, const CallArgs& args) -> absl::StatusOr<Value> {
    const FilterFn* method = FindMethod(subject, name);
    if (!method) return absl::InvalidArgumentError(absl::StrCat("expects a string, got ", subject.KindName()));
    return (*method)(subject, args);
  };
}

}  // namespace

const absl::flat_hash_map<std::string, FilterFn>& Filters() {
  static const auto* const kFilters = new absl::flat_hash_map<std::string, FilterFn>{
      {"trim", ViaMethod("strip")},
      {"upper", ViaMethod("upper")},
      {"lower", ViaMethod("lower")},
      {"title", ViaMethod("title")},
      {"capitalize", ViaMethod("capitalize")},
      {"replace", ViaMethod("replace")},
      {"tojson", ToJson},
      {"length", Length},
      {"count", Length},
      {"default", Default},
      {"d", Default},
      {"join", Join},
      {"first", [](const Value& s, const CallArgs&) { return Ends(s, true); }},
      {"last", [](const Value& s, const CallArgs&) { return Ends(s, false); }},
      {"items", Items},
      {"int", ToInt},
      {"reverse", Reverse},
      {"string", [](const Value& s, const CallArgs&) -> absl::StatusOr<Value> {
         return Value(Json(ToPrintString(s)));
       }},
      {"safe", [](const Value& s, const CallArgs&) -> absl::StatusOr<Value> { return s; }},
      {"list", [](const Value& s, const CallArgs&) -> absl::StatusOr<Value> {
         JINJA_ASSIGN_OR_RETURN(std::vector<Json> items, Iterate(s));
         return Value(Json(std::move(items)));
       }},
      {"map", Map},
      {"selectattr", [](const Value& s, const CallArgs& a) { return Select(s, a, true, true); }},
      {"rejectattr", [](const Value& s, const CallArgs& a) { return Select(s, a, true, false); }},
      {"select", [](const Value& s, const CallArgs& a) { return Select(s, a, false, true); }},
      {"reject", [](const Value& s, const CallArgs& a) { return Select(s, a, false, false); }},
  };
  return *kFilters;
}

}  // namespace trellis::jinja::internal
