#ifndef TRELLIS_JINJA_TEMPLATE_H_
#define TRELLIS_JINJA_TEMPLATE_H_

// A Jinja2 template, the subset Hugging Face chat templates are written in
// (docs/models.md lists it): {{ }}, {% %}, {# #} with whitespace control;
// if/elif/else, for (loop.*, else, an if filter, break/continue), set
// (also namespace attributes and blocks), macros, generation blocks;
// the filters, tests and methods of jinja/builtins.h; Python's operators
// and printing. Parse errors and render errors are InvalidArgument
// statuses naming the template's line and column; nothing aborts.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/value.h"

namespace trellis::jinja {

// What one rendering may take (docs/jobs.md): steps (statements,
// expressions and loop iterations evaluated) and bytes (its output, and
// any string or repetition it makes on the way). Past either, Render fails
// naming the bound: a template with a huge loop or a huge output ends in
// an error, never a hang or exhausted memory.
struct RenderLimits {
  int64_t max_steps = 5'000'000;
  int64_t max_bytes = int64_t{32} << 20;
};

class Template {
 public:
  // `options`: transformers renders chat templates with trim_blocks and
  // lstrip_blocks on.
  [[nodiscard]] static absl::StatusOr<Template> Parse(absl::string_view source,
                                                      const LexOptions& options);

  // Renders with `variables` (and namespace, range and dict, which the
  // variables may shadow). Functions such as raise_exception are variables
  // holding MakeFunction values.
  [[nodiscard]] absl::StatusOr<std::string> Render(const std::map<std::string, Value>& variables,
                                                   const RenderLimits& limits = {}) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace trellis::jinja

#endif  // TRELLIS_JINJA_TEMPLATE_H_
