#!/usr/bin/env python3
"""Writes tests/data/chat_templates/cases.json: expected renders of chat templates by Python jinja2, configured as
transformers configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, a
{% generation %} tag, its tojson / raise_exception / strftime_now). Inputs: every tests/data/chat_templates/*.jinja
against a set of conversations, plus inline snippets for edge semantics. Each case holds the expected text or the
expected error ("raise": the raise_exception message; "error": any other error, checked only as a failure).
Run from the repository root: python3 tools/gen_chat_template_cases.py"""
import json
import pathlib

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

DIR = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "chat_templates"


class RaiseError(Exception):
    pass


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %}: renders its body (transformers tracks assistant masks with it)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])

    def raise_exception(message):
        raise RaiseError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "strftime_now is not golden-tested"
    return env


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city, in °C.",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "e.g. \"Paris\""},
                                          "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Web search",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
]

CONVERSATIONS = {
    "system_user": {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"}]},
    "user_only": {"messages": [{"role": "user", "content": "What is 2+2?"}]},
    "multi_turn": {"messages": [
        {"role": "system", "content": "  Be kind.\n"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi, how can I help?"},
        {"role": "user", "content": "Tell me a 'joke' about \"quotes\" — ünïcödé 你好"}]},
    "no_generation_prompt": {"add_generation_prompt": False, "messages": [
        {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"}]},
    "thinking_history": {"messages": [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nstep 1\n</think>\n\nA1"},
        {"role": "user", "content": "Q2"}]},
    "content_parts": {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "sys part"}]},
        {"role": "user", "content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}]}]},
    "tools_given": {"tools": TOOLS, "messages": [{"role": "user", "content": "Weather in Paris?"}]},
    "tool_round_trip": {"tools": TOOLS, "messages": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21 °C."},
        {"role": "user", "content": "Thanks"}]},
    "tool_calls_dict_args": {"tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather and news?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}},
            {"id": "b", "type": "function", "function": {"name": "search", "arguments": {"q": "news"}}}]},
        {"role": "tool", "tool_call_id": "a", "content": "cold"},
        {"role": "tool", "tool_call_id": "b", "content": "calm"}]},
    "enable_thinking_false": {"kwargs": {"enable_thinking": False}, "messages": [{"role": "user", "content": "Hi"}]},
    "thinking_true": {"kwargs": {"thinking": True, "enable_thinking": True},
                      "messages": [{"role": "user", "content": "Hi"}]},
    "llama_kwargs": {"kwargs": {"date_string": "01 Jan 2025", "tools_in_user_message": False}, "tools": TOOLS,
                     "messages": [{"role": "user", "content": "Hi"}]},
}

# Inline snippets: (name, template, variables). Variables are passed as chat_template_kwargs (messages = []).
SNIPPETS = [
    ("print_values", "{{ none }}|{{ true }}|{{ 1.0 }}|{{ 2.5e3 }}|{{ 1e20 }}|{{ 0.0001 }}|{{ -0.5 }}|{{ [1, 'a', none, true] }}|{{ {'k': [1.5, {'x': none}]} }}|{{ (1,) }}|{{ (1, 'b') }}", {}),
    ("print_strings_repr", "{{ ['it\\'s', \"say \\\"hi\\\"\", 'both \\' \"', 'tab\\tnl\\n'] }}", {}),
    ("undefined", "[{{ nope }}][{{ nope is defined }}][{{ nope | default('d') }}][{{ nope | length }}][{% for x in nope %}x{% endfor %}][{{ 'y' if nope else 'n' }}][{{ d.missing is defined }}]", {"d": {"a": 1}}),
    ("undefined_attr_error", "{{ nope.attr }}", {}),
    ("undefined_add_error", "{{ nope + 1 }}", {}),
    ("attr_of_none_is_undefined", "{{ x.foo is defined }}", {"x": None}),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }} {{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 3 - 1.5 }} {{ true + 1 }}", {}),
    ("compare", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }} {{ 1 == 1.0 }} {{ none == none }} {{ not 1 == 2 }} {{ 'b' >= 'a' }}", {}),
    ("logic", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }} {{ 'a' if false }}|{{ 1 if 0 else 2 if 0 else 3 }}", {}),
    ("slices", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[-2] }} {{ xs[::2] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[-1] }} {{ xs[10] is defined }} {{ u[1:3] }}", {"xs": [1, 2, 3, 4, 5], "s": "hello", "u": "héllo"}),
    ("loop_vars", "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.cycle('a', 'b') }};{% endfor %}", {"xs": ["p", "q", "r"]}),
    ("loop_filter_else", "{% for x in xs if x > 1 %}{{ x }}:{{ loop.length }},{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {"xs": [1, 2, 3]}),
    ("loop_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("loop_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}{% for k in d %}{{ k }}{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("scoping", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + 10 %}{{ x }},{% endfor %}{{ x }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}", {}),
    ("scoping_iter", "{% for i in [1, 2, 3] %}{% if i == 2 %}[{{ z }}]{% endif %}{% set z = i %}{% endfor %}", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("set_tuple_block", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set blk %}  inner {{ a }}\n{% endset %}[{{ blk }}]", {}),
    ("macro", "{% macro greet(name, punct='!') -%}Hi {{ name }}{{ punct }}{%- endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }} {{ greet() }}", {}),
    ("macro_recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}", {}),
    ("macro_sees_globals", "{% macro m() %}{{ g }}{% endmacro %}{{ m() }}", {"g": "global"}),
    ("string_methods", "{{ '  x y  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'b  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a-b-c'.rsplit('-', 1) }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'Ab'.lower() }}{{ 'Ab'.upper() }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'hello'.find('l') }}|{{ 'hello'.count('l') }}|{{ '-'.join(['a', 'b']) }}", {}),
    ("dict_list_methods", "{{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }} {{ xs.index(3) }} {{ xs.count(1) }} {{ d['a'] }} {{ d.a }}", {"d": {"a": 1, "b": 2}, "xs": [1, 3, 1]}),
    ("list_append_refused", "{% set xs = [] %}{{ xs.append(1) }}", {}),
    ("filters_basic", "{{ ' x ' | trim }}|{{ [1, 2] | length }}|{{ 'abc' | count }}|{{ 3 | string }}|{{ '42' | int }}|{{ 'x' | int }}|{{ '2.5' | float }}|{{ 'aB' | lower }}{{ 'aB' | upper }}|{{ 'hello wORLD-x' | title }}|{{ 'hi there' | capitalize }}|{{ xs | first }}{{ xs | last }}|{{ xs | join('-') }}|{{ xs | reverse | list }}|{{ 'ab' | reverse }}|{{ none | default('n') }}|{{ '' | default('e', true) }}|{{ '<a&\"\\'>' | e }}|{{ 'x' | safe }}", {"xs": [3, 1, 2]}),
    ("filters_collections", "{{ d | items | list }}|{{ 'ab' | list }}|{{ users | map(attribute='name') | join(',') }}|{{ ['1', '2'] | map('int') | sum }}|{{ users | selectattr('admin') | map(attribute='name') | list }}|{{ users | rejectattr('admin') | list | length }}|{{ users | selectattr('name', 'equalto', 'bo') | list | length }}|{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('even') | list }}|{{ ['a', 'A', 'b'] | unique | list }}|{{ ['b', 'A', 'c'] | sort }}|{{ users | sort(attribute='name', reverse=true) | map(attribute='name') | list }}|{{ [3, 1] | min }}{{ [3, 1] | max }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}|{{ d | dictsort }}|{{ 'one two  three' | wordcount }}|{{ [1.5, 2] | sum }}", {"d": {"b": 1, "a": 2}, "users": [{"name": "al", "admin": True}, {"name": "bo", "admin": False}]}),
    ("tojson", "{{ v | tojson }}|{{ v | tojson(indent=2) }}|{{ v | tojson(separators=(',', ':')) }}|{{ v | tojson(sort_keys=true) }}|{{ 'é\"\\n' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}|{{ [] | tojson(indent=2) }}|{{ 1.0 | tojson }}", {"v": {"z": [1, 2.5, None, True], "a": {"s": "x"}, "e": {}}}),
    ("indent", "[{{ 'a\\nb\\n\\nc' | indent }}][{{ 'a\\nb' | indent(2, true) }}][{{ 'a\\n\\nb' | indent(2, blank=true) }}][{{ 'x\\ny' | indent('> ') }}]", {}),
    ("tests", "{{ 1 is number }}{{ 1 is integer }}{{ 1.5 is float }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ true is boolean }}{{ true is true }}{{ false is false }}{{ none is none }}{{ range is callable }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 2 is eq 2 }}{{ 2 is ne 3 }}{{ 1 is lt 2 }}{{ 3 is gt 2 }}{{ 2 is le 2 }}{{ 2 is ge 3 }}{{ 'a' is in 'abc' }}{{ x is sameas x }}{{ 1 is not string }}", {"x": [1]}),
    ("globals", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", {}),
    ("raise", "{% if x %}{{ raise_exception('bad role: ' ~ x) }}{% endif %}", {"x": "robot"}),
    ("whitespace_control", "a  {%- if true %}\n  b {{- ' c ' -}}  d\n  {%+ if true %}e{% endif +%}\n  {# note #}\n  f {#- x -#} g\n{%- endif %}\n\n  h\n", {}),
    ("lstrip_trim", "x\n    {% if true %}\n    y\n    {% endif %}\n  {{ 'z' }}\n{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\nend", {}),
    ("lstrip_after_var", "{{ 'a' }}  {% if true %}b{% endif %}\n{{ 'c' }}\n  {% if true %}d{% endif %}", {}),
    ("raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}|{%- raw -%}  x  {%- endraw -%}|", {}),
    ("comments", "a{# comment {{ x }} #}b\n  {# own line #}\nc{#- trimmed -#}  d", {}),
    ("string_literals", "{{ 'a\\tb' }}|{{ \"dq 'sq'\" }}|{{ 'un\\u00efc' }}|{{ 'x' 'y' }}|{{ '\\\\n' }}", {}),
    ("generation", "{% for m in messages2 %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}", {"messages2": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}),
    ("filter_precedence", "{{ -2 | abs }} {{ 'a' ~ 'b' | upper }} {{ 1 + 2 | string }} {{ not true is false }} {{ [1, 2] | length > 1 }}", {}),
    ("parse_error_line", "line1\n{% if x %}\nline3\n{% endfor %}\n", {}),
    ("parse_error_expr", "a\nb\n{{ 1 + }}", {}),
    ("unknown_filter", "{{ 1 | nosuchfilter }}", {}),
    ("type_error", "{{ 'a' + 1 }}", {}),
    ("nested_data", "{% for m in conv %}{{ m.role }}:{% for p in m.content %}{{ p.text | default('?') }}{% endfor %};{% endfor %}", {"conv": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]}]}),
    ("trailing_newline_dropped", "a\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("split_maxsplit_keeps_remainder", "{{ ' a b '.split(none, 1) }}{{ ' a b '.rsplit(none, 1) }}{{ ' a b '.split(none, 0) }}{{ ' a  b  c '.rsplit(none, 1) }}{{ 'a b c'.split(none, 5) }}", {}),
    ("startswith_bounds", "{{ 'abc'.startswith('b', 1) }}{{ 'abc'.startswith('', 5) }}{{ 'abc'.startswith('c', -1) }}{{ 'abc'.endswith('b', 0, 2) }}{{ 'abc'.endswith('b', 0, -1) }}{{ 'ñab'.startswith('a', 1) }}{{ 'abc'.startswith(('x', 'c'), 2) }}", {}),
    ("round_like_python", "{{ 2 | round }} {{ 1250 | round(-2) }} {{ 1350 | round(-2) }} {{ -1251 | round(-2) }} {{ 2.55 | round(1) }} {{ 2.675 | round(2) }} {{ 0.125 | round(2) }} {{ -0.5 | round }} {{ 2 | round(0, 'floor') }} {{ 1234.5 | round(-2) }}", {}),
    ("plus_does_not_end_a_variable", "{{ 'a' +}}", {}),
    ("set_messages_shadow", "{% set messages2 = msgs[1:] %}{{ messages2 | length }}{% for m in msgs %}{% set msgs = [] %}{% endfor %}{{ msgs | length }}", {"msgs": [1, 2, 3]}),
]


def render(env, source, messages, opts):
    ctx = {"messages": messages, "tools": opts.get("tools"), "documents": None,
           "add_generation_prompt": opts.get("add_generation_prompt", True),
           "bos_token": opts.get("bos_token", "<s>"), "eos_token": opts.get("eos_token", "</s>")}
    ctx.update(opts.get("kwargs", {}))
    try:
        return {"expected": env.from_string(source).render(**ctx)}
    except RaiseError as e:
        return {"raise": str(e)}
    except Exception as e:  # noqa: BLE001 - any jinja2 failure is an expected error
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    env = make_env()
    cases = []
    for path in sorted(DIR.glob("*.jinja")):
        source = path.read_text()
        for name, conv in CONVERSATIONS.items():
            opts = {"bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": conv.get("add_generation_prompt", True),
                    "tools": conv.get("tools"), "kwargs": conv.get("kwargs", {})}
            case = {"name": f"{path.stem}/{name}", "template_file": path.name, "messages": conv["messages"], **opts}
            case.update(render(env, source, conv["messages"], opts))
            cases.append(case)
    for name, source, variables in SNIPPETS:
        opts = {"bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": True, "tools": None, "kwargs": variables}
        case = {"name": f"snippet/{name}", "template": source, "messages": [], **opts}
        case.update(render(env, source, [], opts))
        cases.append(case)
    (DIR / "cases.json").write_text(json.dumps({"jinja2_version": jinja2.__version__, "cases": cases},
                                               ensure_ascii=False, indent=1) + "\n")
    n_err = sum(1 for c in cases if "expected" not in c)
    print(f"{len(cases)} cases ({n_err} expected errors) -> {DIR / 'cases.json'}")


if __name__ == "__main__":
    main()
