#ifndef TRELLIS_JINJA_BUILTINS_H_
#define TRELLIS_JINJA_BUILTINS_H_

// The filters ({{ x | name(args) }}), tests ({% if x is name %}), methods
// of strings and dicts ({{ s.strip() }}) and global functions (namespace,
// range, dict) templates call, each a registry by name. Their errors carry
// no position; the interpreter adds the caller's line and column.

#include <functional>
#include <map>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "jinja/value.h"

namespace trellis::jinja::internal {

using FilterFn = std::function<absl::StatusOr<Value>(const Value& subject, const CallArgs& args)>;
using TestFn = std::function<absl::StatusOr<bool>(const Value& subject, const CallArgs& args)>;

const absl::flat_hash_map<std::string, FilterFn>& Filters();
const absl::flat_hash_map<std::string, TestFn>& Tests();

// The method `name` of a string or dict, if it has one.
const FilterFn* FindMethod(const Value& self, absl::string_view name);

// namespace(), range(), dict().
std::map<std::string, Value> BuiltinGlobals();

// The argument at `index` or named `name`, null when absent; kKeywordOnly
// for arguments that can only be named.
inline constexpr size_t kKeywordOnly = static_cast<size_t>(-1);
const Value* Arg(const CallArgs& args, size_t index, absl::string_view name);
// Requires a string argument (at `index` or `name`) or the default.
absl::StatusOr<std::string> StringArg(const CallArgs& args, size_t index, absl::string_view name,
                                      absl::string_view fallback);
// Python's str.strip(chars) family (chars empty: whitespace).
enum class StripSide { kBoth, kLeft, kRight };
std::string Strip(absl::string_view s, const Value* chars, StripSide side);
// The items a for loop or a filter walks: list items, dict keys, string
// characters; nothing for undefined; an error for anything else.
absl::StatusOr<std::vector<Json>> Iterate(const Value& v);

}  // namespace trellis::jinja::internal

#endif  // TRELLIS_JINJA_BUILTINS_H_
