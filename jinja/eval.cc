// Expressions: Interpreter::Eval and its parts (interpreter.h).

#include <cmath>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/lexer.h"
#include "jinja/status_macros.h"

namespace trellis::jinja::internal {
namespace {

bool IntLike(const Json& j) { return j.is_number_integer() || j.is_boolean(); }
int64_t Int(const Json& j) { return j.is_boolean() ? (j.get<bool>() ? 1 : 0) : j.get<int64_t>(); }
double Float(const Json& j) { return j.is_boolean() ? Int(j) : j.get<double>(); }
bool Numeric(const Value& v) { return v.is_json() && (v.json().is_number() || v.json().is_boolean()); }

// Python's arithmetic on two numbers: ints stay ints except under /.
absl::StatusOr<Json> Arithmetic(BinaryOp op, const Json& a, const Json& b) {
  const bool ints = IntLike(a) && IntLike(b);
  if ((op == BinaryOp::kDiv || op == BinaryOp::kFloorDiv || op == BinaryOp::kMod) && Float(b) == 0) {
    return absl::InvalidArgumentError("division by zero");
  }
  switch (op) {
    case BinaryOp::kAdd: return ints ? Json(Int(a) + Int(b)) : Json(Float(a) + Float(b));
    case BinaryOp::kSub: return ints ? Json(Int(a) - Int(b)) : Json(Float(a) - Float(b));
    case BinaryOp::kMul: return ints ? Json(Int(a) * Int(b)) : Json(Float(a) * Float(b));
    case BinaryOp::kDiv: return Json(Float(a) / Float(b));
    case BinaryOp::kFloorDiv:
      if (ints) {
        const int64_t q = Int(a) / Int(b);
        return Json(q * Int(b) != Int(a) && ((Int(a) < 0) != (Int(b) < 0)) ? q - 1 : q);
      }
      return Json(std::floor(Float(a) / Float(b)));
    case BinaryOp::kMod:
      if (ints) {
        const int64_t r = Int(a) % Int(b);
        return Json(r != 0 && ((r < 0) != (Int(b) < 0)) ? r + Int(b) : r);
      }
      return Json(Float(a) - std::floor(Float(a) / Float(b)) * Float(b));
    case BinaryOp::kPow:
      if (ints && Int(b) >= 0) return Json(static_cast<int64_t>(std::llround(std::pow(Int(a), Int(b)))));
      return Json(std::pow(Float(a), Float(b)));
    case BinaryOp::kConcat: break;
  }
  return absl::InternalError("not an arithmetic operator");
}

// `seq` `times` over; refused past 100,000 times or `max_bytes` of text
// (a list's counted as its JSON).
absl::StatusOr<Json> Repeat(const Json& seq, int64_t times, int64_t max_bytes) {
  if (times > 100000) return absl::InvalidArgumentError("repetition too large");
  const size_t bytes =
      seq.is_string() ? seq.get_ref<const std::string&>().size() : seq.dump().size();
  if (times > 0 && bytes > static_cast<size_t>(max_bytes / times)) {
    return absl::InvalidArgumentError(absl::StrCat("repetition of ", times, " x ", bytes,
                                                   " bytes, more than ", max_bytes,
                                                   ", the most one rendering may make"));
  }
  Json out = seq.is_string() ? Json("") : Json::array();
  for (int64_t i = 0; i < times; ++i) {
    if (seq.is_string()) {
      out.get_ref<std::string&>() += seq.get<std::string>();
    } else {
      for (const Json& item : seq) out.push_back(item);
    }
  }
  return out;
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) return absl::InvalidArgumentError("'in <string>' needs a string on the left");
    return absl::StrContains(container.json().get<std::string>(), item.json().get<std::string>());
  }
  if (container.is_dict()) return item.is_string() && container.json().contains(item.json().get<std::string>());
  JINJA_ASSIGN_OR_RETURN(std::vector<Json> items, Iterate(container));
  for (const Json& j : items) {
    if (Equal(item, Value(j))) return true;
  }
  return false;
}

// Python's index normalization for item access: negative counts from the end.
bool NormalizeIndex(int64_t& i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  return i >= 0 && static_cast<size_t>(i) < n;
}

}  // namespace

absl::StatusOr<Value> Interpreter::Eval(const Expr& e) {
  JINJA_RETURN_IF_ERROR(Step(e.pos));
  JINJA_ASSIGN_OR_RETURN(Value v, EvalExpr(e));
  // A list counts its elements' own bytes (their contents are counted
  // where they were made).
  const size_t bytes = v.is_string() ? v.json().get_ref<const std::string&>().size()
                       : v.is_list() ? v.json().size() * sizeof(Json)
                                     : 0;
  JINJA_RETURN_IF_ERROR(CheckBytes(e.pos, bytes));
  return v;
}

absl::StatusOr<Value> Interpreter::EvalExpr(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return Value(e.literal);
    case ExprKind::kName:
      return Lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kDict:
      return EvalCollection(e);
    case ExprKind::kAttr:
      return EvalAttr(e);
    case ExprKind::kItem:
      return EvalItem(e);
    case ExprKind::kSlice:
      return EvalSlice(e);
    case ExprKind::kCall:
      return EvalCall(e);
    case ExprKind::kFilter:
      return EvalFilter(e);
    case ExprKind::kTest:
      return EvalTest(e);
    case ExprKind::kNeg: {
      JINJA_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0]));
      if (!Numeric(v)) return ErrorAt(e.pos, absl::StrCat("cannot negate ", v.KindName()));
      return Value(IntLike(v.json()) ? Json(-Int(v.json())) : Json(-Float(v.json())));
    }
    case ExprKind::kNot: {
      JINJA_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0]));
      return Value(Json(!v.Truthy()));
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      JINJA_ASSIGN_OR_RETURN(Value left, Eval(*e.children[0]));
      if (left.Truthy() == (e.kind == ExprKind::kOr)) return left;
      return Eval(*e.children[1]);
    }
    case ExprKind::kCond: {
      JINJA_ASSIGN_OR_RETURN(Value cond, Eval(*e.children[1]));
      if (cond.Truthy()) return Eval(*e.children[0]);
      if (e.children.size() > 2) return Eval(*e.children[2]);
      return Value(Undefined{"the else branch of an if expression"});
    }
    case ExprKind::kBinary:
      return EvalBinary(e);
    case ExprKind::kCompare:
      return EvalCompare(e);
  }
  return ErrorAt(e.pos, "unknown expression");
}

absl::StatusOr<Value> Interpreter::EvalCollection(const Expr& e) {
  Json out = e.kind == ExprKind::kList ? Json::array() : Json::object();
  for (size_t i = 0; i < e.children.size(); ++i) {
    JINJA_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i]));
    if (!v.is_json()) {
      return ErrorAt(e.children[i]->pos, absl::StrCat("cannot store ", v.KindName(), " in a list or dict"));
    }
    if (e.kind == ExprKind::kList) {
      out.push_back(v.json());
      continue;
    }
    if (!v.is_string()) return ErrorAt(e.children[i]->pos, "dict keys must be strings");
    JINJA_ASSIGN_OR_RETURN(Value value, Eval(*e.children[++i]));
    if (!value.is_json()) {
      return ErrorAt(e.children[i]->pos, absl::StrCat("cannot store ", value.KindName(), " in a dict"));
    }
    out[v.json().get<std::string>()] = value.json();
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> Interpreter::EvalAttr(const Expr& e) {
  JINJA_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
  if (obj.is_undefined()) {
    return ErrorAt(e.pos, absl::StrCat(obj.undefined().what, " (reading attribute '", e.name, "')"));
  }
  if (obj.is_namespace()) {
    auto it = obj.ns().attrs.find(e.name);
    if (it != obj.ns().attrs.end()) return it->second;
  } else if (obj.is_dict()) {
    auto it = obj.json().find(e.name);
    if (it != obj.json().end()) return Value(*it);
  }
  return Value(Undefined{absl::StrCat(obj.KindName(), " has no attribute '", e.name, "'")});
}

absl::StatusOr<Value> Interpreter::EvalItem(const Expr& e) {
  JINJA_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
  JINJA_ASSIGN_OR_RETURN(Value key, Eval(*e.children[1]));
  if (obj.is_undefined()) return ErrorAt(e.pos, absl::StrCat(obj.undefined().what, " (reading an item)"));
  const std::string missing = absl::StrCat(obj.KindName(), " has no item ", ToPrintString(key));
  if (obj.is_namespace() && key.is_string()) {
    auto it = obj.ns().attrs.find(key.json().get<std::string>());
    if (it != obj.ns().attrs.end()) return it->second;
  } else if (obj.is_dict() && key.is_string()) {
    auto it = obj.json().find(key.json().get<std::string>());
    if (it != obj.json().end()) return Value(*it);
  } else if ((obj.is_list() || obj.is_string()) && key.is_json() && IntLike(key.json())) {
    int64_t i = Int(key.json());
    if (obj.is_list()) {
      if (NormalizeIndex(i, obj.json().size())) return Value(obj.json()[static_cast<size_t>(i)]);
    } else {
      const std::u32string s = DecodeUtf8(obj.json().get<std::string>());
      if (NormalizeIndex(i, s.size())) return Value(Json(EncodeUtf8(s.substr(static_cast<size_t>(i), 1))));
    }
  }
  return Value(Undefined{missing});
}

absl::StatusOr<Value> Interpreter::EvalSlice(const Expr& e) {
  JINJA_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
  int64_t bounds[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (!e.children[k + 1]) continue;
    JINJA_ASSIGN_OR_RETURN(Value v, Eval(*e.children[k + 1]));
    if (v.is_none()) continue;
    if (!v.is_json() || !IntLike(v.json())) return ErrorAt(e.pos, "slice bounds must be integers");
    bounds[k] = Int(v.json());
    given[k] = true;
  }
  const int64_t step = bounds[2];
  if (step == 0) return ErrorAt(e.pos, "slice step cannot be zero");
  std::u32string text;
  std::vector<Json> items;
  if (obj.is_string()) {
    text = DecodeUtf8(obj.json().get<std::string>());
  } else if (obj.is_list()) {
    items.assign(obj.json().begin(), obj.json().end());
  } else {
    return ErrorAt(e.pos, absl::StrCat("cannot slice ", obj.KindName()));
  }
  const int64_t n = static_cast<int64_t>(obj.is_string() ? text.size() : items.size());
  // Python's slice.indices().
  auto clamp = [&](int64_t v, bool is_given, int64_t fallback) {
    if (!is_given) return fallback;
    if (v < 0) v += n;
    const int64_t lo = step < 0 ? -1 : 0;
    const int64_t hi = step < 0 ? n - 1 : n;
    return v < lo ? lo : v > hi ? hi : v;
  };
  const int64_t start = clamp(bounds[0], given[0], step < 0 ? n - 1 : 0);
  const int64_t stop = clamp(bounds[1], given[1], step < 0 ? -1 : n);
  std::u32string out_text;
  Json out_items = Json::array();
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (obj.is_string()) {
      out_text += text[static_cast<size_t>(i)];
    } else {
      out_items.push_back(items[static_cast<size_t>(i)]);
    }
  }
  return obj.is_string() ? Value(Json(EncodeUtf8(out_text))) : Value(std::move(out_items));
}

absl::StatusOr<CallArgs> Interpreter::EvalArgs(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.children.size(); ++i) {
    JINJA_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i]));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [key, expr] : e.kwargs) {
    JINJA_ASSIGN_OR_RETURN(Value v, Eval(*expr));
    args.keyword.emplace_back(key, std::move(v));
  }
  return args;
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& e) {
  const Expr& callee = *e.children[0];
  JINJA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
  absl::StatusOr<Value> result;
  if (callee.kind == ExprKind::kAttr) {
    JINJA_ASSIGN_OR_RETURN(Value self, Eval(*callee.children[0]));
    if (const FilterFn* method = FindMethod(self, callee.name)) {
      result = (*method)(self, args);
      if (!result.ok()) return ErrorAt(e.pos, absl::StrCat(callee.name, "(): ", result.status().message()));
      return result;
    }
  }
  JINJA_ASSIGN_OR_RETURN(Value fn, Eval(callee));
  if (!fn.is_callable()) {
    const std::string what = fn.is_undefined() ? fn.undefined().what : fn.KindName() + " is not callable";
    return ErrorAt(e.pos, absl::StrCat("cannot call: ", what));
  }
  result = fn.function()(args);
  if (!result.ok()) return ErrorAt(e.pos, result.status().message());
  return result;
}

absl::StatusOr<Value> Interpreter::EvalFilter(const Expr& e) {
  auto it = Filters().find(e.name);
  if (it == Filters().end()) return ErrorAt(e.pos, absl::StrCat("no filter named '", e.name, "'"));
  JINJA_ASSIGN_OR_RETURN(Value subject, Eval(*e.children[0]));
  JINJA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
  absl::StatusOr<Value> result = it->second(subject, args);
  if (!result.ok()) return ErrorAt(e.pos, absl::StrCat("filter '", e.name, "': ", result.status().message()));
  return result;
}

absl::StatusOr<Value> Interpreter::EvalTest(const Expr& e) {
  auto it = Tests().find(e.name);
  if (it == Tests().end()) return ErrorAt(e.pos, absl::StrCat("no test named '", e.name, "'"));
  JINJA_ASSIGN_OR_RETURN(Value subject, Eval(*e.children[0]));
  JINJA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
  absl::StatusOr<bool> result = it->second(subject, args);
  if (!result.ok()) return ErrorAt(e.pos, absl::StrCat("test '", e.name, "': ", result.status().message()));
  return Value(Json(*result != e.negated));
}

absl::StatusOr<Value> Interpreter::EvalBinary(const Expr& e) {
  JINJA_ASSIGN_OR_RETURN(Value a, Eval(*e.children[0]));
  JINJA_ASSIGN_OR_RETURN(Value b, Eval(*e.children[1]));
  if (e.binary == BinaryOp::kConcat) return Value(Json(ToPrintString(a) + ToPrintString(b)));
  if (Numeric(a) && Numeric(b)) {
    absl::StatusOr<Json> r = Arithmetic(e.binary, a.json(), b.json());
    if (!r.ok()) return ErrorAt(e.pos, r.status().message());
    return Value(*std::move(r));
  }
  if (e.binary == BinaryOp::kAdd && a.is_json() && b.is_json() && a.json().type() == b.json().type() &&
      (a.is_string() || a.is_list())) {
    Json out = a.json();
    if (a.is_string()) {
      out.get_ref<std::string&>() += b.json().get<std::string>();
    } else {
      for (const Json& item : b.json()) out.push_back(item);
    }
    return Value(std::move(out));
  }
  if (e.binary == BinaryOp::kMul && a.is_json() && b.is_json()) {
    const bool seq_first = (a.is_string() || a.is_list()) && b.json().is_number_integer();
    const bool seq_second = (b.is_string() || b.is_list()) && a.json().is_number_integer();
    if (seq_first || seq_second) {
      absl::StatusOr<Json> r = seq_first ? Repeat(a.json(), b.json().get<int64_t>(), max_bytes_)
                                         : Repeat(b.json(), a.json().get<int64_t>(), max_bytes_);
      if (!r.ok()) return ErrorAt(e.pos, r.status().message());
      return Value(*std::move(r));
    }
  }
  const std::string detail = a.is_undefined()   ? a.undefined().what
                             : b.is_undefined() ? b.undefined().what
                                                : a.KindName() + " and " + b.KindName();
  return ErrorAt(e.pos, absl::StrCat("unsupported operands: ", detail));
}

absl::StatusOr<Value> Interpreter::EvalCompare(const Expr& e) {
  JINJA_ASSIGN_OR_RETURN(Value left, Eval(*e.children[0]));
  for (size_t k = 0; k < e.compare.size(); ++k) {
    JINJA_ASSIGN_OR_RETURN(Value right, Eval(*e.children[k + 1]));
    absl::StatusOr<bool> ok;
    switch (e.compare[k]) {
      case CompareOp::kEq: ok = Equal(left, right); break;
      case CompareOp::kNe: ok = !Equal(left, right); break;
      case CompareOp::kLt: ok = Less(left, right); break;
      case CompareOp::kGt: ok = Less(right, left); break;
      case CompareOp::kLe: ok = Equal(left, right) ? absl::StatusOr<bool>(true) : Less(left, right); break;
      case CompareOp::kGe: ok = Equal(left, right) ? absl::StatusOr<bool>(true) : Less(right, left); break;
      case CompareOp::kIn: ok = Contains(right, left); break;
      case CompareOp::kNotIn:
        ok = Contains(right, left);
        if (ok.ok()) ok = !*ok;
        break;
    }
    if (!ok.ok()) return ErrorAt(e.children[k + 1]->pos, ok.status().message());
    if (!*ok) return Value(Json(false));
    left = std::move(right);
  }
  return Value(Json(true));
}

}  // namespace trellis::jinja::internal
