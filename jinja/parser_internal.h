#ifndef TRELLIS_JINJA_PARSER_INTERNAL_H_
#define TRELLIS_JINJA_PARSER_INTERNAL_H_

// The recursive-descent parser behind Parse (parser.h): statements in
// parser.cc, expressions (Jinja2's precedence, lowest first: x if c else y,
// or, and, not, comparisons and (not) in, + -, ~, * / // %, **, unary minus,
// then subscripts, attributes, calls, filters and tests) in
// expression_parser.cc.

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace trellis::jinja::internal {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<Body> ParseTemplate();

 private:
  // Statements (parser.cc). ParseBody reads until a block tag named in
  // `ends` (consumed up to its keyword, which lands in *end) or the end of
  // the template (an error when `ends` is not empty: the tag opened at
  // `open` is missing its end).
  absl::Status ParseBody(Body& out, const std::vector<absl::string_view>& ends, std::string* end,
                         Position open, absl::string_view opener);
  absl::Status ParseTag(Body& out);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseIf(Position pos);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseFor(Position pos);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseSet(Position pos);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseMacro(Position pos);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseBreak(Position pos);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseContinue(Position pos);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseGeneration(Position pos);

  // Expressions (expression_parser.cc).
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr);
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseBinary(int level);
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr expr);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr expr, Position pos);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr expr);
  absl::Status ParseCallArgs(Expr& call);
  absl::StatusOr<ExprPtr> ParseSequence(ExprKind kind, absl::string_view close, Position pos);

  // Tokens.
  const Token& Peek(size_t ahead = 0) const;
  Token Next();
  bool IsOp(absl::string_view op, size_t ahead = 0) const;
  bool IsName(absl::string_view name, size_t ahead = 0) const;
  absl::Status ExpectOp(absl::string_view op);
  absl::Status ExpectBlockEnd();
  absl::StatusOr<std::string> ExpectName();
  absl::Status Unexpected(absl::string_view wanted) const;

  std::vector<Token> tokens_;
  size_t i_ = 0;
};

ExprPtr MakeExpr(ExprKind kind, Position pos);

}  // namespace trellis::jinja::internal

#endif  // TRELLIS_JINJA_PARSER_INTERNAL_H_
