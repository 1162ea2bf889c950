// Rendering checked against Jinja2 3.1.6 in transformers' chat template
// environment: each row's expected text is what Python rendered for the same
// template and variables.

#include <gtest/gtest.h>

#include "jinja/template.h"

namespace trellis::jinja {
namespace {

struct Case {
  const char* source;
  const char* context;
  const char* expected;
};

const Case kCases[] = {
    {R"J(a{{ 1 + 2 }}b)J",
     R"J({})J",
     R"J(a3b)J"},
    {R"J({{ 1/2 }} {{ 7//2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} {{ 2.5 * 2 }} {{ 1e20 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 3.0 }} {{ 100.0 * 3 }})J",
     R"J({})J",
     R"J(0.5 3 -4 2 -2 1024 5.0 1e+20 1e-05 0.30000000000000004 3.0 300.0)J"},
    {R"J({{ 'a' ~ 1 ~ none ~ true }} {{ x or 'd' }} {{ 0 and 1 }} {{ [] or [1] }} {{ not 0 }})J",
     R"J({})J",
     R"J(a1NoneTrue d 0 [1] True)J"},
    {R"J({{ [1, 'a', none, true, 1.5, {'k': 'v'}] }} {{ {'a': "it's"} }} {{ 'x' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }})J",
     R"J({})J",
     R"J([1, 'a', None, True, 1.5, {'k': 'v'}] {'a': "it's"} xxx [1, 1] [1, 2])J"},
    {R"J({% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }} {{ m.role }}|{% endfor %})J",
     R"J({"messages": [{"role": "system", "content": "  Be nice.  "}, {"role": "user", "content": "Hi \"q\" 'x' é\n"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [1.5, null, true]}}}]}]})J",
     R"J(10TrueFalse33 system|21FalseFalse32 user|32FalseTrue31 assistant|)J"},
    {R"J({% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m['role'] }}
{% else %}none{% endfor %})J",
     R"J({"messages": [{"role": "system", "content": "  Be nice.  "}, {"role": "user", "content": "Hi \"q\" 'x' é\n"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [1.5, null, true]}}}]}]})J",
     R"J(1:user
2:assistant
)J"},
    {R"J({% for m in [] %}x{% else %}empty{% endfor %})J",
     R"J({})J",
     R"J(empty)J"},
    {R"J({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for k, v in d|items %}{{k}}{{v}}{% endfor %})J",
     R"J({"d": {"z": 1, "a": 2}})J",
     R"J(z=1;a=2;zaz1a2)J"},
    {R"J({%- set ns = namespace(found=false, n=0) -%}
{%- for m in messages -%}
  {%- if m.role == 'user' -%}{%- set ns.found = true -%}{%- endif -%}
  {%- set ns.n = ns.n + 1 %}
{%- endfor -%}
{{ ns.found }} {{ ns.n }})J",
     R"J({"messages": [{"role": "system", "content": "  Be nice.  "}, {"role": "user", "content": "Hi \"q\" 'x' é\n"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [1.5, null, true]}}}]}]})J",
     R"J(True 3)J"},
    {R"J({% if x is defined %}d{% elif y is none %}n{% else %}e{% endif %})J",
     R"J({"y": null})J",
     R"J(n)J"},
    {R"J(  {% if true %}
    yes
  {% endif %}
  {{ 'v' }}
{# comment #}
end
)J",
     R"J({})J",
     R"J(    yes
  v
end)J"},
    {R"J({%- if true -%}   a   {%- endif -%}   b {{- ' c ' -}} d

)J",
     R"J({})J",
     R"J(ab c d
)J"},
    {R"J({% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% if i == 2 %}{% break %}{% endif %}{% endfor %})J",
     R"J({})J",
     R"J(02)J"},
    {R"J({{ messages[0].content.strip() }}|{{ messages[0].content | trim }}|{{ '  a b  c '.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'xxhixx'.strip('x') }}|{{ ' l'.lstrip() }}|{{ 'r '.rstrip() }})J",
     R"J({"messages": [{"role": "system", "content": "  Be nice.  "}, {"role": "user", "content": "Hi \"q\" 'x' é\n"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [1.5, null, true]}}}]}]})J",
     R"J(Be nice.|Be nice.|['a', 'b', 'c']|['a', 'b', '', 'c']|['a', 'b,c']|hi|l|r)J"},
    {R"J({{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}{{ 'abc'.upper() }}{{ 'ABC'.lower() }}{{ 'hello world-x'.title() }}{{ 'hELLO'.capitalize() }}{{ 'aXbX'.replace('X', '-') }})J",
     R"J({})J",
     R"J(TrueTrueABCabcHello World-XHelloa-b-)J"},
    {R"J({{ d.get('a') }}{{ d.get('q', 5) }}{{ d.get('q') }}{{ d.keys() | list }}{{ d.values() | list }})J",
     R"J({"d": {"a": 1}})J",
     R"J(15None['a'][1])J"},
    {R"J({{ tools | tojson }}
{{ tools | tojson(indent=4) }}
{{ tools[0] | tojson(indent=2, sort_keys=true) }}
{{ 'é"\n' | tojson }}{{ 'é' | tojson(ensure_ascii=true) }}{{ [] | tojson(indent=2) }}{{ {} | tojson }}{{ 1.0 | tojson }}{{ none | tojson }})J",
     R"J({"tools": [{"type": "function", "function": {"name": "get_w", "parameters": {"type": "object", "properties": {"loc": {"type": "string", "enum": ["a", "b"]}}, "required": ["loc"]}, "x": 1.25}}]})J",
     R"J([{"type": "function", "function": {"name": "get_w", "parameters": {"type": "object", "properties": {"loc": {"type": "string", "enum": ["a", "b"]}}, "required": ["loc"]}, "x": 1.25}}]
[
    {
        "type": "function",
        "function": {
            "name": "get_w",
            "parameters": {
                "type": "object",
                "properties": {
                    "loc": {
                        "type": "string",
                        "enum": [
                            "a",
                            "b"
                        ]
                    }
                },
                "required": [
                    "loc"
                ]
            },
            "x": 1.25
        }
    }
]
{
  "function": {
    "name": "get_w",
    "parameters": {
      "properties": {
        "loc": {
          "enum": [
            "a",
            "b"
          ],
          "type": "string"
        }
      },
      "required": [
        "loc"
      ],
      "type": "object"
    },
    "x": 1.25
  },
  "type": "function"
}
"é\"\n""\u00e9"[]{}1.0null)J"},
    {R"J({{ [1,2,3] | length }}{{ 'héllo' | length }}{{ d | length }}{{ 'abc' | upper }}{{ x | default('dflt') }}{{ '' | default('e', true) }}{{ [1,2] | join(', ') }}{{ [1,2] | first }}{{ [1,2] | last }}{{ 'abc' | first }}{{ 5 | string }}{{ '42' | int + 1 }}{{ 3.9 | int }}{{ 'x' | int }})J",
     R"J({"d": {"a": 1}})J",
     R"J(351ABCdflte1, 212a54330)J"},
    {R"J({{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | join(',') }}{{ messages | map(attribute='role') | list }}{{ messages | selectattr('tool_calls') | list | length }}{{ messages|selectattr('tool_calls', 'defined')|list|length }})J",
     R"J({"messages": [{"role": "system", "content": "  Be nice.  "}, {"role": "user", "content": "Hi \"q\" 'x' é\n"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [1.5, null, true]}}}]}]})J",
     R"J(1system,assistant['system', 'user', 'assistant']11)J"},
    {R"J({{ 'abcdef'[1:3] }}{{ 'abcdef'[::-1] }}{{ [1,2,3,4][-2:] }}{{ [1,2,3,4][:-1] }}{{ 'héllo'[1] }}{{ [1,2,3][-1] }}{{ [1,2,3,4,5][::2] }}{{ [1,2,3,4,5][4:1:-2] }})J",
     R"J({})J",
     R"J(bcfedcba[3, 4][1, 2, 3]é3[1, 3, 5][5, 3])J"},
    {R"J({{ 1 if true else 2 }}{{ 1 if false else 2 }}{{ 'x' if false }}|{{ 1 < 2 < 3 }}{{ 3 > 2 > 5 }}{{ 1 == 1.0 }}{{ 'a' in 'cat' }}{{ 'q' not in ['a'] }}{{ 'k' in {'k': 1} }}{{ 2 >= 2 }}{{ 'b' > 'a' }})J",
     R"J({})J",
     R"J(12|TrueFalseTrueTrueTrueTrueTrueTrue)J"},
    {R"J({% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }})J",
     R"J({})J",
     R"J(Hi A! Hi B? Hi C.)J"},
    {R"J({% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t %}block {{ a }}{% endset %}[{{ t }}])J",
     R"J({})J",
     R"J(12[block 1])J"},
    {R"J({{ x is string }}{{ 1 is number }}{{ d is mapping }}{{ [1] is iterable }}{{ [1] is sequence }}{{ 1 is integer }}{{ 1.5 is float }}{{ true is boolean }}{{ true is true }}{{ 0 is false }}{{ 3 is odd }}{{ 4 is even }}{{ 2 is in [1,2] }}{{ x is not none }})J",
     R"J({"x": "s", "d": {}})J",
     R"J(TrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrue)J"},
    {R"J({% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}{{ sys }}{{ loop_messages | length }})J",
     R"J({"messages": [{"role": "system", "content": "  Be nice.  "}, {"role": "user", "content": "Hi \"q\" 'x' é\n"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [1.5, null, true]}}}]}]})J",
     R"J(  Be nice.  2)J"},
    {R"J({{ "a\tb\u00e9\x41" }}{{ 'it\'s' }}{{ 'adj' 'acent' }})J",
     R"J({})J",
     R"J(a	béAit'sadjacent)J"},
    {R"J({{ message.content }})J",
     R"J({"message": {"content": [{"type": "text", "text": "hi"}]}})J",
     R"J([{'type': 'text', 'text': 'hi'}])J"},
    {R"J({{ '%d' }}{{ {'a': 1}['a'] }}{{ {'a': {'b': [5]}}.a.b.0 }})J",
     R"J({})J",
     R"J(%d15)J"},
    {R"J(x {%+ if true %}y{% endif +%} 
 z)J",
     R"J({})J",
     R"J(x y 
 z)J"},
    {R"J(
  {%- for i in [1,2] %}
    {{ i }}
  {%- endfor %}
)J",
     R"J({})J",
     R"J(    1    2)J"},
    {R"J({% for i in range(2) %}{% set x = i %}{% endfor %}{{ x }}{% for i in range(5, 0, -2) %}{{ i }}{% endfor %})J",
     R"J({})J",
     R"J(531)J"},
    {R"J({{ loop }})J",
     R"J({})J",
     R"J()J"},
    {R"J({{ 1 if x is defined else 2 }}{{ none is none }}{{ x|default(none) is none }})J",
     R"J({})J",
     R"J(2TrueTrue)J"},
};

TEST(JinjaPythonParityTest, EveryCaseRendersAsJinja2Does) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.source);
    absl::StatusOr<Template> t = Template::Parse(c.source, LexOptions{true, true});
    ASSERT_TRUE(t.ok()) << t.status();
    std::map<std::string, Value> vars;
    const Json context = Json::parse(c.context);
    for (const auto& [k, v] : context.items()) vars[k] = Value(v);
    absl::StatusOr<std::string> out = t->Render(vars);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, c.expected);
  }
}

}  // namespace
}  // namespace trellis::jinja
