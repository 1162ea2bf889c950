#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "jinja/parser_internal.h"
#include "jinja/status_macros.h"

namespace trellis::jinja::internal {
namespace {

struct BinaryLevel {
  std::vector<std::pair<absl::string_view, BinaryOp>> ops;
};

// Binary operators by precedence, loosest first (Jinja2's math1, concat,
// math2, pow).
const std::vector<BinaryLevel>& BinaryLevels() {
  static const auto* const kLevels = new std::vector<BinaryLevel>{
      {{{"+", BinaryOp::kAdd}, {"-", BinaryOp::kSub}}},
      {{{"~", BinaryOp::kConcat}}},
      {{{"*", BinaryOp::kMul}, {"/", BinaryOp::kDiv}, {"//", BinaryOp::kFloorDiv},
        {"%", BinaryOp::kMod}}},
      {{{"**", BinaryOp::kPow}}},
  };
  return *kLevels;
}

const std::vector<std::pair<absl::string_view, CompareOp>>& CompareOps() {
  static const auto* const kOps = new std::vector<std::pair<absl::string_view, CompareOp>>{
      {"==", CompareOp::kEq}, {"!=", CompareOp::kNe}, {"<", CompareOp::kLt},
      {"<=", CompareOp::kLe}, {">", CompareOp::kGt},  {">=", CompareOp::kGe}};
  return *kOps;
}

ExprPtr Binary(ExprKind kind, Position pos, ExprPtr left, ExprPtr right) {
  ExprPtr node = MakeExpr(kind, pos);
  node->children.push_back(std::move(left));
  node->children.push_back(std::move(right));
  return node;
}

}  // namespace

absl::StatusOr<ExprPtr> Parser::ParseTuple(bool with_condexpr) {
  const Position pos = Peek().pos;
  JINJA_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(with_condexpr));
  if (!IsOp(",")) return first;
  ExprPtr list = MakeExpr(ExprKind::kList, pos);
  list->children.push_back(std::move(first));
  while (IsOp(",")) {
    Next();
    const TokenKind k = Peek().kind;
    if (k == TokenKind::kVarEnd || k == TokenKind::kBlockEnd || IsOp(")")) break;
    JINJA_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
    list->children.push_back(std::move(item));
  }
  return list;
}

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  JINJA_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  while (with_condexpr && IsName("if")) {
    ExprPtr cond = MakeExpr(ExprKind::kCond, Next().pos);
    cond->children.push_back(std::move(expr));
    JINJA_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    cond->children.push_back(std::move(test));
    if (IsName("else")) {
      Next();
      JINJA_ASSIGN_OR_RETURN(ExprPtr otherwise, ParseExpression());
      cond->children.push_back(std::move(otherwise));
    }
    expr = std::move(cond);
  }
  return expr;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  JINJA_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    const Position pos = Next().pos;
    JINJA_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    left = Binary(ExprKind::kOr, pos, std::move(left), std::move(right));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  JINJA_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    const Position pos = Next().pos;
    JINJA_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    left = Binary(ExprKind::kAnd, pos, std::move(left), std::move(right));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (!IsName("not")) return ParseCompare();
  ExprPtr node = MakeExpr(ExprKind::kNot, Next().pos);
  JINJA_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
  node->children.push_back(std::move(operand));
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  const Position pos = Peek().pos;
  JINJA_ASSIGN_OR_RETURN(ExprPtr first, ParseBinary(0));
  ExprPtr node;
  while (true) {
    CompareOp op;
    if (Peek().kind == TokenKind::kOperator) {
      auto it = std::find_if(CompareOps().begin(), CompareOps().end(),
                             [&](const auto& p) { return p.first == Peek().text; });
      if (it == CompareOps().end()) break;
      op = it->second;
      Next();
    } else if (IsName("in")) {
      op = CompareOp::kIn;
      Next();
    } else if (IsName("not") && IsName("in", 1)) {
      op = CompareOp::kNotIn;
      Next();
      Next();
    } else {
      break;
    }
    if (!node) {
      node = MakeExpr(ExprKind::kCompare, pos);
      node->children.push_back(std::move(first));
    }
    JINJA_ASSIGN_OR_RETURN(ExprPtr right, ParseBinary(0));
    node->compare.push_back(op);
    node->children.push_back(std::move(right));
  }
  return node ? std::move(node) : std::move(first);
}

absl::StatusOr<ExprPtr> Parser::ParseBinary(int level) {
  if (level == static_cast<int>(BinaryLevels().size())) return ParseUnary(true);
  const auto& ops = BinaryLevels()[level].ops;
  JINJA_ASSIGN_OR_RETURN(ExprPtr left, ParseBinary(level + 1));
  while (Peek().kind == TokenKind::kOperator) {
    auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& p) { return p.first == Peek().text; });
    if (it == ops.end()) break;
    const Position pos = Next().pos;
    JINJA_ASSIGN_OR_RETURN(ExprPtr right, ParseBinary(level + 1));
    left = Binary(ExprKind::kBinary, pos, std::move(left), std::move(right));
    left->binary = it->second;
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  ExprPtr expr;
  if (IsOp("-") || IsOp("+")) {
    const bool negate = Peek().text == "-";
    const Position pos = Next().pos;
    JINJA_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    if (negate) {
      expr = MakeExpr(ExprKind::kNeg, pos);
      expr->children.push_back(std::move(operand));
    } else {
      expr = std::move(operand);
    }
  } else {
    JINJA_ASSIGN_OR_RETURN(expr, ParsePrimary());
  }
  JINJA_ASSIGN_OR_RETURN(expr, ParsePostfix(std::move(expr)));
  if (with_filter) return ParseFilterExpr(std::move(expr));
  return expr;
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Peek();
  const Position pos = t.pos;
  if (t.kind == TokenKind::kName) {
    const std::string name = Next().text;
    ExprPtr lit = MakeExpr(ExprKind::kLiteral, pos);
    if (name == "true" || name == "True") {
      lit->literal = true;
    } else if (name == "false" || name == "False") {
      lit->literal = false;
    } else if (name == "none" || name == "None") {
      lit->literal = nullptr;
    } else {
      lit->kind = ExprKind::kName;
      lit->name = name;
    }
    return lit;
  }
  if (t.kind == TokenKind::kString) {
    std::string text;
    while (Peek().kind == TokenKind::kString) text += Next().text;
    ExprPtr lit = MakeExpr(ExprKind::kLiteral, pos);
    lit->literal = std::move(text);
    return lit;
  }
  if (t.kind == TokenKind::kNumber) {
    ExprPtr lit = MakeExpr(ExprKind::kLiteral, pos);
    lit->literal = Next().number;
    return lit;
  }
  if (IsOp("(")) {
    Next();
    if (IsOp(")")) {
      Next();
      return MakeExpr(ExprKind::kList, pos);
    }
    JINJA_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(true));
    JINJA_RETURN_IF_ERROR(ExpectOp(")"));
    return inner;
  }
  if (IsOp("[")) {
    Next();
    return ParseSequence(ExprKind::kList, "]", pos);
  }
  if (IsOp("{")) {
    Next();
    return ParseSequence(ExprKind::kDict, "}", pos);
  }
  return Unexpected("an expression");
}

absl::StatusOr<ExprPtr> Parser::ParseSequence(ExprKind kind, absl::string_view close, Position pos) {
  ExprPtr node = MakeExpr(kind, pos);
  while (!IsOp(close)) {
    if (!node->children.empty()) {
      JINJA_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(close)) break;
    }
    JINJA_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    node->children.push_back(std::move(item));
    if (kind == ExprKind::kDict) {
      JINJA_RETURN_IF_ERROR(ExpectOp(":"));
      JINJA_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      node->children.push_back(std::move(value));
    }
  }
  Next();
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr expr) {
  while (true) {
    const Position pos = Peek().pos;
    if (IsOp(".")) {
      Next();
      const Token& t = Peek();
      if (t.kind != TokenKind::kName && !(t.kind == TokenKind::kNumber && t.number.is_number_integer())) {
        return Unexpected("an attribute name");
      }
      ExprPtr node = MakeExpr(t.kind == TokenKind::kName ? ExprKind::kAttr : ExprKind::kItem, pos);
      node->children.push_back(std::move(expr));
      if (t.kind == TokenKind::kName) {
        node->name = Next().text;
      } else {
        ExprPtr index = MakeExpr(ExprKind::kLiteral, t.pos);
        index->literal = Next().number;
        node->children.push_back(std::move(index));
      }
      expr = std::move(node);
    } else if (IsOp("[")) {
      Next();
      JINJA_ASSIGN_OR_RETURN(expr, ParseSubscript(std::move(expr), pos));
    } else if (IsOp("(")) {
      ExprPtr call = MakeExpr(ExprKind::kCall, pos);
      call->children.push_back(std::move(expr));
      JINJA_RETURN_IF_ERROR(ParseCallArgs(*call));
      expr = std::move(call);
    } else {
      return expr;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr expr, Position pos) {
  ExprPtr parts[3];
  if (!IsOp(":")) {
    JINJA_ASSIGN_OR_RETURN(parts[0], ParseExpression());
  }
  if (!IsOp(":")) {
    JINJA_RETURN_IF_ERROR(ExpectOp("]"));
    ExprPtr node = MakeExpr(ExprKind::kItem, pos);
    node->children.push_back(std::move(expr));
    node->children.push_back(std::move(parts[0]));
    return node;
  }
  for (int k = 1; k < 3 && IsOp(":"); ++k) {
    Next();
    if (!IsOp(":") && !IsOp("]")) {
      JINJA_ASSIGN_OR_RETURN(parts[k], ParseExpression());
    }
  }
  JINJA_RETURN_IF_ERROR(ExpectOp("]"));
  ExprPtr node = MakeExpr(ExprKind::kSlice, pos);
  node->children.push_back(std::move(expr));
  for (auto& part : parts) node->children.push_back(std::move(part));
  return node;
}

absl::Status Parser::ParseCallArgs(Expr& call) {
  JINJA_RETURN_IF_ERROR(ExpectOp("("));
  bool first = true;
  while (!IsOp(")")) {
    if (!first) {
      JINJA_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
    }
    first = false;
    if (Peek().kind == TokenKind::kName && IsOp("=", 1)) {
      std::string key = Next().text;
      Next();
      JINJA_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call.kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      JINJA_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call.children.push_back(std::move(value));
    }
  }
  Next();
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr expr) {
  while (true) {
    const Position pos = Peek().pos;
    if (IsOp("|")) {
      Next();
      ExprPtr node = MakeExpr(ExprKind::kFilter, pos);
      JINJA_ASSIGN_OR_RETURN(node->name, ExpectName());
      node->children.push_back(std::move(expr));
      if (IsOp("(")) JINJA_RETURN_IF_ERROR(ParseCallArgs(*node));
      expr = std::move(node);
    } else if (IsName("is")) {
      Next();
      ExprPtr node = MakeExpr(ExprKind::kTest, pos);
      if (IsName("not")) {
        Next();
        node->negated = true;
      }
      JINJA_ASSIGN_OR_RETURN(node->name, ExpectName());
      node->children.push_back(std::move(expr));
      const Token& t = Peek();
      const bool bare_argument =
          t.kind == TokenKind::kString || t.kind == TokenKind::kNumber || IsOp("[") || IsOp("{") ||
          (t.kind == TokenKind::kName && t.text != "else" && t.text != "or" && t.text != "and" &&
           t.text != "if" && t.text != "is" && t.text != "in" && t.text != "not");
      if (IsOp("(")) {
        JINJA_RETURN_IF_ERROR(ParseCallArgs(*node));
      } else if (bare_argument) {
        JINJA_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
        JINJA_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
        node->children.push_back(std::move(arg));
      }
      expr = std::move(node);
    } else {
      return expr;
    }
  }
}

}  // namespace trellis::jinja::internal
