#ifndef TRELLIS_JINJA_VALUE_H_
#define TRELLIS_JINJA_VALUE_H_

// The values a template computes with: JSON data (null, bool, int, float,
// string, list, dict; nlohmann's ordered_json, so dicts keep the order their
// keys were written in, as Python's do), undefined, namespace() objects and
// callables (macros, raise_exception, strftime_now, bound methods). Printing,
// truth, equality and ordering follow Python, since the templates are
// written against Jinja2 on Python: {{ 1.0 }} prints "1.0", {{ true }}
// prints "True", a dict prints as Python's repr.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace trellis::jinja {

using Json = nlohmann::ordered_json;

class Value;

// Arguments of a call: positional first, then keyword arguments in order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using Function = std::function<absl::StatusOr<Value>(const CallArgs&)>;

// An undefined name or a missing key; `what` names it for errors.
struct Undefined {
  std::string what;
};

struct Namespace;

class Value {
 public:
  Value() : v_(Undefined{}) {}
  Value(Json json) : v_(std::move(json)) {}  // NOLINT: values are JSON most of the time
  Value(Undefined undefined) : v_(std::move(undefined)) {}  // NOLINT
  Value(std::shared_ptr<Namespace> ns) : v_(std::move(ns)) {}  // NOLINT
  Value(std::shared_ptr<const Function> fn) : v_(std::move(fn)) {}  // NOLINT

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_json() const { return std::holds_alternative<Json>(v_); }
  bool is_namespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(v_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Function>>(v_); }
  // Convenience tests on the JSON kinds (false for the other kinds).
  bool is_string() const { return is_json() && json().is_string(); }
  bool is_number() const { return is_json() && json().is_number(); }
  bool is_list() const { return is_json() && json().is_array(); }
  bool is_dict() const { return is_json() && json().is_object(); }
  bool is_none() const { return is_json() && json().is_null(); }

  const Json& json() const { return std::get<Json>(v_); }
  const Undefined& undefined() const { return std::get<Undefined>(v_); }
  Namespace& ns() const { return *std::get<std::shared_ptr<Namespace>>(v_); }
  const Function& function() const { return *std::get<std::shared_ptr<const Function>>(v_); }

  // Python's truth: empty strings, lists and dicts, zero, None and
  // undefined are false.
  bool Truthy() const;
  // A short name of the kind for errors: "string", "list", "undefined", ...
  std::string KindName() const;

 private:
  std::variant<Undefined, Json, std::shared_ptr<Namespace>, std::shared_ptr<const Function>> v_;
};

// namespace(): a mutable bag of attributes shared by reference, the one
// thing a template may change from inside a loop.
struct Namespace {
  std::map<std::string, Value> attrs;
};

// Wraps a C++ callable as a value.
Value MakeFunction(Function fn);

// What {{ v }} prints: strings as they are, undefined as "", everything else
// as Python's str() would (True, None, 1.0, {'a': [1, 2]}).
std::string ToPrintString(const Value& v);
// Python's repr() of JSON data (quoted strings).
std::string PythonRepr(const Json& j);
// Python's repr() of a float: the shortest digits that read back the same,
// "1.0", "1e-05", "1e+16", "inf", "nan".
std::string PythonFloatRepr(double d);

// Python's ==: 1 == 1.0 == True, lists and dicts element by element;
// undefined equals only undefined.
bool Equal(const Value& a, const Value& b);
// Python's <: numbers with numbers, strings with strings (by code point),
// lists lexicographically; anything else is an error.
absl::StatusOr<bool> Less(const Value& a, const Value& b);

// Unicode code points of UTF-8 text (invalid bytes pass through one code
// point each, so nothing is lost) and back.
std::u32string DecodeUtf8(absl::string_view text);
std::string EncodeUtf8(std::u32string_view text);

}  // namespace trellis::jinja

#endif  // TRELLIS_JINJA_VALUE_H_
