#include "jinja/template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trellis::jinja {
namespace {

using ::testing::HasSubstr;

constexpr LexOptions kChat{true, true};

absl::StatusOr<std::string> Render(absl::string_view source, const Json& context = Json::object(),
                                   LexOptions options = kChat) {
  absl::StatusOr<Template> t = Template::Parse(source, options);
  if (!t.ok()) return t.status();
  std::map<std::string, Value> vars;
  for (const auto& [k, v] : context.items()) vars[k] = Value(v);
  return t->Render(vars);
}

std::string Error(absl::string_view source, const Json& context = Json::object()) {
  absl::StatusOr<std::string> out = Render(source, context);
  return out.ok() ? "rendered: " + *out : std::string(out.status().message());
}

TEST(TemplateTest, WhitespaceControlWithoutTrimOptions) {
  EXPECT_EQ(*Render("a {%- if true -%} b {%- endif %}\nc", {}, LexOptions{}), "ab\nc");
  EXPECT_EQ(*Render("  {% if true %}\nx\n  {% endif %}\n", {}, LexOptions{}), "  \nx\n  ");
}

TEST(TemplateTest, TrimAndLstripBlocksAsTransformersSetsThem) {
  EXPECT_EQ(*Render("  {% if true %}\nx\n  {% endif %}\ny\n"), "x\ny");
  EXPECT_EQ(*Render("a {%+ if true %}b{% endif +%}\nc"), "a b\nc");
  EXPECT_EQ(*Render("  {# note #}\nx  {{ 1 }}\n"), "x  1");
}

TEST(TemplateTest, ForLoopsScopeTheirAssignments) {
  EXPECT_EQ(*Render("{% set x = 'o' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}"),
            "o1o2o");
  EXPECT_EQ(*Render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
                    "{% endfor %}{{ ns.n }}"),
            "6");
}

TEST(TemplateTest, LoopVariablesAndFilterAndElse) {
  EXPECT_EQ(*Render("{% for x in xs if x > 1 %}{{ loop.index }}/{{ loop.length }}{{ '|' if not loop.last }}"
                    "{% else %}none{% endfor %}",
                    {{"xs", {1, 2, 3}}}),
            "1/2|2/2");
  EXPECT_EQ(*Render("{% for x in [] %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(*Render("{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}),
            "b1a2");
}

TEST(TemplateTest, MacrosTakeDefaultsAndKeywords) {
  EXPECT_EQ(*Render("{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(b=2, a=3) }}"),
            "[1B][32]");
  EXPECT_THAT(Error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), HasSubstr("takes 1 arguments, got 2"));
  EXPECT_THAT(Error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"), HasSubstr("macros nest too deep"));
}

TEST(TemplateTest, GenerationBlocksRenderTheirBody) {
  EXPECT_EQ(*Render("a{% generation %}b{% endgeneration %}c"), "abc");
}

TEST(TemplateTest, ParseErrorsNameLineAndColumn) {
  EXPECT_EQ(Error("ok\n  {% if x %}\nnever closed"), "line 2, column 6: 'if' is never closed with 'endif'");
  EXPECT_EQ(Error("{{ 1 +\n }}"), "line 2, column 2: expected an expression, found '}}'");
  EXPECT_EQ(Error("x\n{% frobnicate %}"), absl::StrCat("line 2, column 4: unexpected tag 'frobnicate' ",
                                                     "(supported: if, for, set, macro, break, continue, "
                                                     "generation and their end tags)"));
  EXPECT_EQ(Error("{{ 'abc }}"), "line 1, column 4: string literal is never closed");
  EXPECT_EQ(Error("{{ a ? b }}"), "line 1, column 6: unexpected character '?'");
  EXPECT_EQ(Error("{# open"), "line 1, column 1: comment is never closed with #}");
}

TEST(TemplateTest, RenderErrorsNameLineAndColumn) {
  EXPECT_EQ(Error("\n\n   {{ x.y }}"), "line 3, column 8: 'x' is undefined (reading attribute 'y')");
  EXPECT_EQ(Error("{{ 'a' + 1 }}"), "line 1, column 8: unsupported operands: string and int");
  EXPECT_EQ(Error("{{ [1] | nope }}"), "line 1, column 8: no filter named 'nope'");
  EXPECT_EQ(Error("{{ 1 // 0 }}"), "line 1, column 6: division by zero");
  EXPECT_EQ(Error("{% set x = 1 %}{% set x.a = 2 %}"),
            "line 1, column 19: cannot set attribute 'a' of int 'x' (only namespace() objects take attributes)");
  EXPECT_EQ(Error("{% break %}"), "line 1, column 4: break or continue outside a for loop");
  EXPECT_EQ(Error("{% for a, b in [1] %}{% endfor %}"), "line 1, column 4: cannot unpack 1 into 2 names");
  EXPECT_EQ(Error("{{ 1 < 'a' }}"), "line 1, column 8: cannot order int and string");
}

TEST(TemplateTest, FunctionsAreCalledWithTheirArguments) {
  absl::StatusOr<Template> t = Template::Parse("{{ f(1, k='v') }}\n{{ raise_exception('bad: ' ~ n) }}", kChat);
  ASSERT_TRUE(t.ok()) << t.status();
  std::map<std::string, Value> vars;
  vars["n"] = Json(7);
  vars["f"] = MakeFunction([](const CallArgs& a) -> absl::StatusOr<Value> {
    return Value(Json(absl::StrCat(a.positional.size(), a.keyword[0].first, ToPrintString(a.keyword[0].second))));
  });
  vars["raise_exception"] = MakeFunction([](const CallArgs& a) -> absl::StatusOr<Value> {
    return absl::InvalidArgumentError(ToPrintString(a.positional[0]));
  });
  absl::StatusOr<std::string> out = t->Render(vars);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "line 2, column 19: bad: 7");
  vars.erase("raise_exception");
  EXPECT_THAT(std::string(t->Render(vars).status().message()),
              HasSubstr("cannot call: 'raise_exception' is undefined"));
}

TEST(TemplateTest, PythonPrinting) {
  EXPECT_EQ(*Render("{{ x }}", {{"x", {{"s", "it's"}, {"q", "\"'"}, {"n", nullptr}, {"f", 0.5}}}}),
            R"({'s': "it's", 'q': '"\'', 'n': None, 'f': 0.5})");
  EXPECT_EQ(*Render("{{ [1e16, 1e-4, 123456.789, -0.0] }}"), "[1e+16, 0.0001, 123456.789, -0.0]");
}

// Every prefix of a template that uses most of the language parses or fails
// with a status; rendering the prefixes that parse never crashes either.
TEST(TemplateTest, TruncatedTemplatesFailCleanly) {
  const std::string source = R"({%- set ns = namespace(a=[1, 2], b={'k': "v\n"}) -%}
{%- macro m(x, y=none) %}{{ x ~ (y or '') | trim }}{% endmacro %}
{%- for item in items if item.role != 'system' %}
  {%- if loop.first and item['content'] is string %}{{ m(item.content[::-1], y='!') }}
  {%- elif item.content is not defined %}{{ raise_exception('no content at ' ~ loop.index0) }}
  {%- else %}{{ item | tojson(indent=2) }}{% break %}{% endif %}
{%- endfor %}{# done #}{{ ns.b.k | replace('v', 'w') }})";
  const Json context = {{"items", {{{"role", "user"}, {"content", "abc"}}, {{"role", "x"}}}}};
  int parsed = 0;
  for (size_t n = 0; n <= source.size(); ++n) {
    absl::StatusOr<std::string> out = Render(source.substr(0, n), context);
    parsed += out.ok() || !absl::StrContains(out.status().message(), "never closed");
  }
  EXPECT_GT(parsed, 0);
  EXPECT_EQ(Error(source, context), "line 5, column 60: cannot call: 'raise_exception' is undefined");
}

// A rendering's bounds (RenderLimits): a huge loop stops at max_steps, a
// huge output or string at max_bytes, each with an error naming the bound.
TEST(TemplateTest, AHugeLoopStopsAtTheStepBound) {
  const std::string message = Error(
      "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}");
  EXPECT_THAT(message, HasSubstr("the rendering takes more than 5000000 steps"));
  absl::StatusOr<Template> t = Template::Parse("{% for i in range(50) %}x{% endfor %}", kChat);
  ASSERT_TRUE(t.ok());
  const absl::StatusOr<std::string> small = t->Render({}, RenderLimits{40, 1 << 20});
  EXPECT_THAT(small.status().message(), HasSubstr("more than 40 steps"));
  EXPECT_EQ(t->Render({}, RenderLimits{200, 1 << 20}).value(), std::string(50, 'x'));
}

TEST(TemplateTest, AHugeOutputStopsAtTheByteBound) {
  EXPECT_THAT(Error("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}"),
              HasSubstr("the rendering makes text of"));
  EXPECT_THAT(Error("{% set s = 'x' * 100000 %}{{ s * 1000 }}"),
              HasSubstr("repetition of 1000 x 100000 bytes, more than 33554432"));
  EXPECT_THAT(Error("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}"
                    "{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
              HasSubstr("the rendering makes text of"));
}

}  // namespace
}  // namespace trellis::jinja
