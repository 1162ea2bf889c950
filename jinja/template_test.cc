#include "jinja/template.h"

#include <gtest/gtest.h>

namespace trellis::jinja {
namespace {

std::string Render(absl::string_view source, const Json& context = Json::object()) {
  absl::StatusOr<Template> t = Template::Parse(source, LexOptions{true, true});
  if (!t.ok()) return "PARSE: " + std::string(t.status().message());
  std::map<std::string, Value> vars;
  for (const auto& [k, v] : context.items()) vars[k] = Value(v);
  absl::StatusOr<std::string> out = t->Render(vars);
  if (!out.ok()) return "RENDER: " + std::string(out.status().message());
  return *out;
}

TEST(TemplateTest, Smoke) {
  EXPECT_EQ(Render("a{{ 1 + 2 }}b"), "a3b");
}

}  // namespace
}  // namespace trellis::jinja
