#include "jinja/parser.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "jinja/parser_internal.h"
#include "jinja/status_macros.h"

namespace trellis::jinja {
namespace internal {
namespace {

using StmtParser = absl::StatusOr<std::unique_ptr<Stmt>> (Parser::*)(Position);

std::unique_ptr<Stmt> MakeStmt(StmtKind kind, Position pos) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = kind;
  stmt->pos = pos;
  return stmt;
}

absl::string_view TokenName(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText: return "text";
    case TokenKind::kVarBegin: return "'{{'";
    case TokenKind::kVarEnd: return "'}}'";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "'%}'";
    case TokenKind::kString: return "a string";
    case TokenKind::kNumber: return "a number";
    case TokenKind::kEnd: return "the end of the template";
    default: return t.text;
  }
}

}  // namespace

ExprPtr MakeExpr(ExprKind kind, Position pos) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->pos = pos;
  return expr;
}

const Token& Parser::Peek(size_t ahead) const {
  return tokens_[std::min(i_ + ahead, tokens_.size() - 1)];
}

Token Parser::Next() {
  Token t = Peek();
  if (i_ < tokens_.size() - 1) ++i_;
  return t;
}

bool Parser::IsOp(absl::string_view op, size_t ahead) const {
  return Peek(ahead).kind == TokenKind::kOperator && Peek(ahead).text == op;
}

bool Parser::IsName(absl::string_view name, size_t ahead) const {
  return Peek(ahead).kind == TokenKind::kName && Peek(ahead).text == name;
}

absl::Status Parser::Unexpected(absl::string_view wanted) const {
  const Token& t = Peek();
  std::string got(TokenName(t));
  if (t.kind == TokenKind::kName || t.kind == TokenKind::kOperator) got = absl::StrCat("'", t.text, "'");
  return ErrorAt(t.pos, absl::StrCat("expected ", wanted, ", found ", got));
}

absl::Status Parser::ExpectOp(absl::string_view op) {
  if (!IsOp(op)) return Unexpected(absl::StrCat("'", op, "'"));
  Next();
  return absl::OkStatus();
}

absl::Status Parser::ExpectBlockEnd() {
  if (Peek().kind != TokenKind::kBlockEnd) return Unexpected("'%}'");
  Next();
  return absl::OkStatus();
}

absl::StatusOr<std::string> Parser::ExpectName() {
  if (Peek().kind != TokenKind::kName) return Unexpected("a name");
  return Next().text;
}

absl::StatusOr<Body> Parser::ParseTemplate() {
  Body body;
  JINJA_RETURN_IF_ERROR(ParseBody(body, {}, nullptr, Position{}, ""));
  return body;
}

absl::Status Parser::ParseBody(Body& out, const std::vector<absl::string_view>& ends,
                               std::string* end, Position open, absl::string_view opener) {
  while (true) {
    const Token& t = Peek();
    switch (t.kind) {
      case TokenKind::kEnd:
        if (ends.empty()) return absl::OkStatus();
        return ErrorAt(open, absl::StrCat("'", opener, "' is never closed with '", ends.back(), "'"));
      case TokenKind::kText: {
        auto stmt = MakeStmt(StmtKind::kText, t.pos);
        stmt->text = Next().text;
        out.push_back(std::move(stmt));
        break;
      }
      case TokenKind::kVarBegin: {
        auto stmt = MakeStmt(StmtKind::kOutput, Next().pos);
        JINJA_ASSIGN_OR_RETURN(stmt->expr, ParseTuple(true));
        if (Peek().kind != TokenKind::kVarEnd) return Unexpected("'}}'");
        Next();
        out.push_back(std::move(stmt));
        break;
      }
      case TokenKind::kBlockBegin: {
        const Token& keyword = Peek(1);
        if (keyword.kind == TokenKind::kName &&
            std::find(ends.begin(), ends.end(), keyword.text) != ends.end()) {
          Next();
          *end = Next().text;
          return absl::OkStatus();
        }
        JINJA_RETURN_IF_ERROR(ParseTag(out));
        break;
      }
      default:
        return Unexpected("text or a tag");
    }
  }
}

absl::Status Parser::ParseTag(Body& out) {
  static const auto* const kParsers = new std::vector<std::pair<absl::string_view, StmtParser>>{
      {"if", &Parser::ParseIf},       {"for", &Parser::ParseFor},
      {"set", &Parser::ParseSet},     {"macro", &Parser::ParseMacro},
      {"generation", &Parser::ParseGeneration}, {"break", &Parser::ParseBreak},
      {"continue", &Parser::ParseContinue},
  };
  Next();  // {%
  const Token keyword = Peek();
  if (keyword.kind != TokenKind::kName) return Unexpected("a tag name");
  Next();
  auto it = std::find_if(kParsers->begin(), kParsers->end(),
                         [&](const auto& p) { return p.first == keyword.text; });
  if (it == kParsers->end()) {
    return ErrorAt(keyword.pos, absl::StrCat("unexpected tag '", keyword.text,
                                             "' (supported: if, for, set, macro, break, "
                                             "continue, generation and their end tags)"));
  }
  JINJA_ASSIGN_OR_RETURN(std::unique_ptr<Stmt> stmt, (this->*(it->second))(keyword.pos));
  out.push_back(std::move(stmt));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseIf(Position pos) {
  auto stmt = MakeStmt(StmtKind::kIf, pos);
  std::string end = "elif";
  while (end == "elif") {
    JINJA_ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression());
    JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
    Body body;
    JINJA_RETURN_IF_ERROR(ParseBody(body, {"elif", "else", "endif"}, &end, pos, "if"));
    stmt->branches.emplace_back(std::move(cond), std::move(body));
  }
  if (end == "else") {
    JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
    JINJA_RETURN_IF_ERROR(ParseBody(stmt->else_body, {"endif"}, &end, pos, "if"));
  }
  JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
  return stmt;
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseFor(Position pos) {
  auto stmt = MakeStmt(StmtKind::kFor, pos);
  do {
    JINJA_ASSIGN_OR_RETURN(std::string target, ExpectName());
    stmt->targets.push_back(std::move(target));
  } while (IsOp(",") && (Next(), true));
  if (!IsName("in")) return Unexpected("'in'");
  Next();
  JINJA_ASSIGN_OR_RETURN(stmt->expr, ParseTuple(false));
  if (IsName("if")) {
    Next();
    JINJA_ASSIGN_OR_RETURN(stmt->filter, ParseExpression());
  }
  JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  JINJA_RETURN_IF_ERROR(ParseBody(stmt->body, {"else", "endfor"}, &end, pos, "for"));
  if (end == "else") {
    JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
    JINJA_RETURN_IF_ERROR(ParseBody(stmt->else_body, {"endfor"}, &end, pos, "for"));
  }
  JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
  return stmt;
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseSet(Position pos) {
  auto stmt = MakeStmt(StmtKind::kSet, pos);
  JINJA_ASSIGN_OR_RETURN(std::string target, ExpectName());
  stmt->targets.push_back(std::move(target));
  if (IsOp(".")) {
    Next();
    JINJA_ASSIGN_OR_RETURN(stmt->name, ExpectName());
  } else {
    while (IsOp(",")) {
      Next();
      JINJA_ASSIGN_OR_RETURN(std::string more, ExpectName());
      stmt->targets.push_back(std::move(more));
    }
  }
  if (Peek().kind == TokenKind::kBlockEnd && stmt->targets.size() == 1 && stmt->name.empty()) {
    Next();
    stmt->kind = StmtKind::kSetBlock;
    std::string end;
    JINJA_RETURN_IF_ERROR(ParseBody(stmt->body, {"endset"}, &end, pos, "set"));
    JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
    return stmt;
  }
  JINJA_RETURN_IF_ERROR(ExpectOp("="));
  JINJA_ASSIGN_OR_RETURN(stmt->expr, ParseTuple(true));
  JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
  return stmt;
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseMacro(Position pos) {
  auto stmt = MakeStmt(StmtKind::kMacro, pos);
  JINJA_ASSIGN_OR_RETURN(stmt->name, ExpectName());
  JINJA_RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    if (!stmt->params.empty()) JINJA_RETURN_IF_ERROR(ExpectOp(","));
    JINJA_ASSIGN_OR_RETURN(std::string param, ExpectName());
    ExprPtr default_value;
    if (IsOp("=")) {
      Next();
      JINJA_ASSIGN_OR_RETURN(default_value, ParseExpression());
    }
    stmt->params.emplace_back(std::move(param), std::move(default_value));
  }
  Next();
  JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  JINJA_RETURN_IF_ERROR(ParseBody(stmt->body, {"endmacro"}, &end, pos, "macro"));
  JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
  return stmt;
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseBreak(Position pos) {
  JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
  return MakeStmt(StmtKind::kBreak, pos);
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseContinue(Position pos) {
  JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
  return MakeStmt(StmtKind::kContinue, pos);
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseGeneration(Position pos) {
  auto stmt = MakeStmt(StmtKind::kScope, pos);
  JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  JINJA_RETURN_IF_ERROR(ParseBody(stmt->body, {"endgeneration"}, &end, pos, "generation"));
  JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
  return stmt;
}

}  // namespace internal

absl::StatusOr<Body> Parse(std::vector<Token> tokens) {
  return internal::Parser(std::move(tokens)).ParseTemplate();
}

}  // namespace trellis::jinja
