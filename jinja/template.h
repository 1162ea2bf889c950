#ifndef TRELLIS_JINJA_TEMPLATE_H_
#define TRELLIS_JINJA_TEMPLATE_H_

// A Jinja2 template, the subset Hugging Face chat templates are written in
// (docs/models.md lists it): {{ }}, {% %}, {# #} with whitespace control;
// if/elif/else, for (loop.*, else, an if filter, break/continue), set
// (also namespace attributes and blocks), macros, generation blocks;
// the filters, tests and methods of jinja/builtins.h; Python's operators
// and printing. Parse errors and render errors are InvalidArgument
// statuses naming the template's line and column; nothing aborts.

#include <map>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/value.h"

namespace trellis::jinja {

class Template {
 public:
  // `options`: transformers renders chat templates with trim_blocks and
  // lstrip_blocks on.
  [[nodiscard]] static absl::StatusOr<Template> Parse(absl::string_view source,
                                                      const LexOptions& options);

  // Renders with `variables` (and namespace, range and dict, which the
  // variables may shadow). Functions such as raise_exception are variables
  // holding MakeFunction values.
  [[nodiscard]] absl::StatusOr<std::string> Render(
      const std::map<std::string, Value>& variables) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace trellis::jinja

#endif  // TRELLIS_JINJA_TEMPLATE_H_
