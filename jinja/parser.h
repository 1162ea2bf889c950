#ifndef TRELLIS_JINJA_PARSER_H_
#define TRELLIS_JINJA_PARSER_H_

// Builds the statement tree from the lexer's tokens. Errors name the line
// and column of the token that does not fit, or of the tag left open.

#include <vector>

#include "absl/status/statusor.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace trellis::jinja {

[[nodiscard]] absl::StatusOr<Body> Parse(std::vector<Token> tokens);

}  // namespace trellis::jinja

#endif  // TRELLIS_JINJA_PARSER_H_
