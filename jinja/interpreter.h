#ifndef TRELLIS_JINJA_INTERPRETER_H_
#define TRELLIS_JINJA_INTERPRETER_H_

// Renders a parsed template: statements in interpreter.cc, expressions in
// eval.cc. Scopes follow Jinja2: a for loop's body has its own (a set
// inside it is gone after the loop; namespace() attributes are not), if
// blocks share their parent's, and a macro sees its parameters and the
// template's top level.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/value.h"

namespace trellis::jinja::internal {

class Interpreter {
 public:
  // At most `max_steps` statements, expressions and loop iterations, and
  // no output or string longer than `max_bytes` (jinja/template.h
  // RenderLimits).
  Interpreter(std::map<std::string, Value> globals, int64_t max_steps, int64_t max_bytes);

  absl::Status Render(const Body& body, std::string& out);
  absl::StatusOr<Value> Eval(const Expr& expr);

 private:
  struct Frame {
    std::map<std::string, Value> vars;
    bool macro = false;  // lookups skip from here to the top level
  };
  enum class Flow { kNormal, kBreak, kContinue };

  // Counts `n` steps; an error naming the bound once past it.
  absl::Status Step(Position pos, int64_t n = 1);
  // An error naming the bound when `bytes` is past it.
  absl::Status CheckBytes(Position pos, size_t bytes) const;
  absl::StatusOr<Value> EvalExpr(const Expr& expr);
  absl::Status Exec(const Stmt& stmt, std::string& out);
  absl::Status ExecFor(const Stmt& stmt, std::string& out);
  absl::Status ExecSet(const Stmt& stmt);
  absl::StatusOr<Value> CallMacro(const Stmt& macro, const CallArgs& args);

  absl::StatusOr<Value> EvalAttr(const Expr& expr);
  absl::StatusOr<Value> EvalItem(const Expr& expr);
  absl::StatusOr<Value> EvalSlice(const Expr& expr);
  absl::StatusOr<Value> EvalCall(const Expr& expr);
  absl::StatusOr<Value> EvalFilter(const Expr& expr);
  absl::StatusOr<Value> EvalTest(const Expr& expr);
  absl::StatusOr<Value> EvalBinary(const Expr& expr);
  absl::StatusOr<Value> EvalCompare(const Expr& expr);
  absl::StatusOr<Value> EvalCollection(const Expr& expr);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& expr, size_t first);

  Value Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value value);

  std::vector<Frame> frames_;
  Flow flow_ = Flow::kNormal;
  int depth_ = 0;
  int64_t steps_ = 0;
  int64_t max_steps_;
  int64_t max_bytes_;
};

}  // namespace trellis::jinja::internal

#endif  // TRELLIS_JINJA_INTERPRETER_H_
