#include "jinja/template.h"

#include <utility>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/parser.h"
#include "jinja/status_macros.h"

namespace trellis::jinja {

absl::StatusOr<Template> Template::Parse(absl::string_view source, const LexOptions& options) {
  JINJA_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source, options));
  JINJA_ASSIGN_OR_RETURN(Body body, jinja::Parse(std::move(tokens)));
  return Template(std::make_shared<const Body>(std::move(body)));
}

absl::StatusOr<std::string> Template::Render(const std::map<std::string, Value>& variables,
                                             const RenderLimits& limits) const {
  std::map<std::string, Value> globals = internal::BuiltinGlobals();
  for (const auto& [name, value] : variables) globals[name] = value;
  internal::Interpreter interpreter(std::move(globals), limits.max_steps, limits.max_bytes);
  std::string out;
  JINJA_RETURN_IF_ERROR(interpreter.Render(*body_, out));
  return out;
}

}  // namespace trellis::jinja
