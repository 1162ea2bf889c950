#include "jinja/interpreter.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"
#include "jinja/lexer.h"
#include "jinja/status_macros.h"

namespace trellis::jinja::internal {
namespace {

// Macros calling themselves without end would exhaust the stack.
constexpr int kMaxDepth = 200;

Json LoopInfo(const std::vector<Json>& items, size_t i) {
  const size_t n = items.size();
  Json loop = Json::object();
  loop["index"] = i + 1;
  loop["index0"] = i;
  loop["revindex"] = n - i;
  loop["revindex0"] = n - i - 1;
  loop["first"] = i == 0;
  loop["last"] = i + 1 == n;
  loop["length"] = n;
  if (i > 0) loop["previtem"] = items[i - 1];
  if (i + 1 < n) loop["nextitem"] = items[i + 1];
  return loop;
}

}  // namespace

Interpreter::Interpreter(std::map<std::string, Value> globals, int64_t max_steps,
                         int64_t max_bytes)
    : max_steps_(max_steps), max_bytes_(max_bytes) {
  frames_.push_back(Frame{std::move(globals), false});
}

absl::Status Interpreter::Step(Position pos, int64_t n) {
  steps_ += n;
  if (steps_ <= max_steps_) return absl::OkStatus();
  return ErrorAt(pos, absl::StrCat("the rendering takes more than ", max_steps_,
                                   " steps (statements, expressions and loop iterations), "
                                   "the most one rendering may take"));
}

absl::Status Interpreter::CheckBytes(Position pos, size_t bytes) const {
  if (bytes <= static_cast<size_t>(max_bytes_)) return absl::OkStatus();
  return ErrorAt(pos, absl::StrCat("the rendering makes text of ", bytes, " bytes, more than ",
                                   max_bytes_, ", the most one rendering may make"));
}

Value Interpreter::Lookup(const std::string& name) const {
  for (size_t k = frames_.size(); k-- > 0;) {
    auto it = frames_[k].vars.find(name);
    if (it != frames_[k].vars.end()) return it->second;
    if (frames_[k].macro) k = 1;  // continue at the top level (k becomes 0)
  }
  return Undefined{absl::StrCat("'", name, "' is undefined")};
}

void Interpreter::Assign(const std::string& name, Value value) {
  frames_.back().vars[name] = std::move(value);
}

absl::Status Interpreter::Render(const Body& body, std::string& out) {
  for (const auto& stmt : body) {
    JINJA_RETURN_IF_ERROR(Exec(*stmt, out));
    if (flow_ != Flow::kNormal) break;
  }
  return absl::OkStatus();
}

absl::Status Interpreter::Exec(const Stmt& stmt, std::string& out) {
  JINJA_RETURN_IF_ERROR(Step(stmt.pos));
  switch (stmt.kind) {
    case StmtKind::kText:
      out += stmt.text;
      return CheckBytes(stmt.pos, out.size());
    case StmtKind::kOutput: {
      JINJA_ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr));
      out += ToPrintString(v);
      return CheckBytes(stmt.pos, out.size());
    }
    case StmtKind::kIf:
      for (const auto& [cond, body] : stmt.branches) {
        JINJA_ASSIGN_OR_RETURN(Value v, Eval(*cond));
        if (v.Truthy()) return Render(body, out);
      }
      return Render(stmt.else_body, out);
    case StmtKind::kFor:
      return ExecFor(stmt, out);
    case StmtKind::kSet:
      return ExecSet(stmt);
    case StmtKind::kSetBlock: {
      std::string captured;
      JINJA_RETURN_IF_ERROR(Render(stmt.body, captured));
      Assign(stmt.targets[0], Value(Json(std::move(captured))));
      return absl::OkStatus();
    }
    case StmtKind::kMacro:
      Assign(stmt.name, MakeFunction([this, &stmt](const CallArgs& args) { return CallMacro(stmt, args); }));
      return absl::OkStatus();
    case StmtKind::kBreak:
    case StmtKind::kContinue:
      if (frames_.back().vars.count("loop") == 0) {
        return ErrorAt(stmt.pos, "break or continue outside a for loop");
      }
      flow_ = stmt.kind == StmtKind::kBreak ? Flow::kBreak : Flow::kContinue;
      return absl::OkStatus();
    case StmtKind::kScope:
      return Render(stmt.body, out);
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecFor(const Stmt& stmt, std::string& out) {
  JINJA_ASSIGN_OR_RETURN(Value iterable, Eval(*stmt.expr));
  absl::StatusOr<std::vector<Json>> all = Iterate(iterable);
  if (!all.ok()) return ErrorAt(stmt.expr->pos, all.status().message());
  JINJA_RETURN_IF_ERROR(Step(stmt.pos, static_cast<int64_t>(all->size())));
  frames_.push_back(Frame{});
  auto bind = [&](const Json& item) -> absl::Status {
    if (stmt.targets.size() == 1) {
      Assign(stmt.targets[0], Value(item));
      return absl::OkStatus();
    }
    if (!item.is_array() || item.size() != stmt.targets.size()) {
      return ErrorAt(stmt.pos, absl::StrCat("cannot unpack ", PythonRepr(item), " into ",
                                            stmt.targets.size(), " names"));
    }
    for (size_t t = 0; t < stmt.targets.size(); ++t) Assign(stmt.targets[t], Value(item[t]));
    return absl::OkStatus();
  };
  std::vector<Json> items;
  absl::Status status;
  for (const Json& item : *all) {
    if (stmt.filter) {
      status = bind(item);
      if (!status.ok()) break;
      absl::StatusOr<Value> keep = Eval(*stmt.filter);
      if (!keep.ok()) {
        status = keep.status();
        break;
      }
      if (!keep->Truthy()) continue;
    }
    items.push_back(item);
  }
  for (size_t i = 0; status.ok() && i < items.size(); ++i) {
    frames_.back().vars.clear();
    status = bind(items[i]);
    if (!status.ok()) break;
    Assign("loop", Value(LoopInfo(items, i)));
    status = Render(stmt.body, out);
    const Flow flow = flow_;
    flow_ = Flow::kNormal;
    if (flow == Flow::kBreak) break;
  }
  frames_.pop_back();
  JINJA_RETURN_IF_ERROR(status);
  if (items.empty()) return Render(stmt.else_body, out);
  return absl::OkStatus();
}

absl::Status Interpreter::ExecSet(const Stmt& stmt) {
  JINJA_ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr));
  if (!stmt.name.empty()) {
    Value target = Lookup(stmt.targets[0]);
    if (!target.is_namespace()) {
      return ErrorAt(stmt.pos, absl::StrCat("cannot set attribute '", stmt.name, "' of ",
                                            target.KindName(), " '", stmt.targets[0],
                                            "' (only namespace() objects take attributes)"));
    }
    target.ns().attrs[stmt.name] = std::move(v);
    return absl::OkStatus();
  }
  if (stmt.targets.size() == 1) {
    Assign(stmt.targets[0], std::move(v));
    return absl::OkStatus();
  }
  if (!v.is_list() || v.json().size() != stmt.targets.size()) {
    return ErrorAt(stmt.pos, absl::StrCat("cannot unpack ", v.KindName(), " into ",
                                          stmt.targets.size(), " names"));
  }
  for (size_t t = 0; t < stmt.targets.size(); ++t) Assign(stmt.targets[t], Value(v.json()[t]));
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::CallMacro(const Stmt& macro, const CallArgs& args) {
  if (args.positional.size() > macro.params.size()) {
    return ErrorAt(macro.pos, absl::StrCat("macro '", macro.name, "' takes ", macro.params.size(),
                                           " arguments, got ", args.positional.size()));
  }
  if (depth_ >= kMaxDepth) return ErrorAt(macro.pos, "macros nest too deep");
  Frame frame{{}, true};
  for (const auto& [key, value] : args.keyword) {
    bool known = false;
    for (const auto& param : macro.params) known = known || param.first == key;
    if (!known) return ErrorAt(macro.pos, absl::StrCat("macro '", macro.name, "' has no parameter '", key, "'"));
    frame.vars[key] = value;
  }
  frames_.push_back(std::move(frame));
  ++depth_;
  absl::Status status;
  for (size_t p = 0; status.ok() && p < macro.params.size(); ++p) {
    const auto& [name, default_value] = macro.params[p];
    if (p < args.positional.size()) {
      Assign(name, args.positional[p]);
    } else if (frames_.back().vars.count(name) == 0 && default_value) {
      absl::StatusOr<Value> v = Eval(*default_value);
      status = v.status();
      if (v.ok()) Assign(name, *std::move(v));
    }
  }
  std::string out;
  if (status.ok()) status = Render(macro.body, out);
  flow_ = Flow::kNormal;
  --depth_;
  frames_.pop_back();
  JINJA_RETURN_IF_ERROR(status);
  return Value(Json(std::move(out)));
}

}  // namespace trellis::jinja::internal
