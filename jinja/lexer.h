#ifndef TRELLIS_JINJA_LEXER_H_
#define TRELLIS_JINJA_LEXER_H_

// Splits a template into tokens: text between tags, the tag delimiters, and
// the names, literals and operators inside {{ }} and {% %}. Comments go,
// and whitespace control is applied here, as Jinja2's lexer does it: "-"
// strips all whitespace on its side, "+" keeps it, trim_blocks drops the
// newline after a block or comment tag, lstrip_blocks the spaces and tabs
// before one on its line; newlines become "\n" and one trailing newline of
// the template is dropped.

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "jinja/value.h"

namespace trellis::jinja {

struct Position {
  int line = 1;
  int column = 1;
};

enum class TokenKind {
  kText,        // literal output; `text` holds it
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifiers and keywords; `text`
  kString,      // a string literal, unescaped, in `text`
  kNumber,      // an int or float literal in `number`
  kOperator,    // + - * / // % ** ~ == != < <= > >= ( ) [ ] { } , . : | =
  kEnd,         // end of the template
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  Json number;
  Position pos;
};

struct LexOptions {
  bool trim_blocks = false;
  bool lstrip_blocks = false;
};

// An InvalidArgument error "line L, column C: message".
absl::Status ErrorAt(Position pos, absl::string_view message);

// Errors name the line and column of what could not be read.
[[nodiscard]] absl::StatusOr<std::vector<Token>> Lex(absl::string_view source,
                                                     const LexOptions& options);

}  // namespace trellis::jinja

#endif  // TRELLIS_JINJA_LEXER_H_
