#ifndef TRELLIS_JINJA_AST_H_
#define TRELLIS_JINJA_AST_H_

// The parsed template: statements holding expressions, each with the
// position it was written at so errors while rendering can name it.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/lexer.h"
#include "jinja/value.h"

namespace trellis::jinja {

enum class ExprKind {
  kLiteral,  // literal
  kName,     // name
  kList,     // children: the items ("(a, b)" tuples are lists too)
  kDict,     // children: key, value, key, value, ...
  kAttr,     // children[0].name
  kItem,     // children[0][children[1]]
  kSlice,    // children[0][children[1]:children[2]:children[3]]; absent parts are null
  kCall,     // children[0](children[1..], kwargs)
  kFilter,   // children[0] | name(children[1..], kwargs)
  kTest,     // children[0] is [not] name(children[1..])
  kNeg,      // -children[0]
  kNot,      // not children[0]
  kBinary,   // children[0] op children[1]
  kCompare,  // children[0] ops[0] children[1] ops[1] children[2] ... (chained)
  kAnd,
  kOr,
  kCond,  // children[0] if children[1] else children[2] (absent else: undefined)
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  Position pos;
  Json literal;
  std::string name;
  BinaryOp binary = BinaryOp::kAdd;
  std::vector<CompareOp> compare;
  bool negated = false;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches (condition, body); else_body
  kFor,       // for targets in expr [if filter]: body; else_body
  kSet,       // set targets = expr, or set targets[0].attr = expr
  kSetBlock,  // set targets[0]: body ... endset
  kMacro,     // macro name(params): body
  kBreak,
  kContinue,
  kScope,  // a block that only renders its body: {% generation %}
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  StmtKind kind = StmtKind::kText;
  Position pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string name;  // kMacro's name; kSet's attribute when assigning ns.attr
  std::vector<std::pair<std::string, ExprPtr>> params;  // defaults may be null
};

}  // namespace trellis::jinja

#endif  // TRELLIS_JINJA_AST_H_
