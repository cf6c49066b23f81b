#!/usr/bin/env python3
"""Write the hand-made seeds of fuzz/corpus/jinja/ (stdlib only).

Deterministic; run from anywhere: python3 fuzz/make_seeds_jinja.py. The input format is
fuzz/fuzz_jinja.c's: a selector byte (bit 0: add_generation_prompt, bit 1: assistant turns),
the template source, then optionally a NUL and a messages JSON list. The seeds are the
published templates of tests/fixtures/chat_templates/ with the fixture's conversations, the
feature snippets of expected.json, and a few hostile templates (runaway loops, deep
recursion, huge strings). The files are seed_*; inputs merged from fuzzing runs are not
touched.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
FX = os.path.join(HERE, "..", "tests", "fixtures", "chat_templates")
OUT = os.path.join(HERE, "corpus", "jinja")


def out(name, sel, src, msgs=None):
    os.makedirs(OUT, exist_ok=True)
    data = bytes([sel]) + src.encode()
    if msgs is not None:
        data += b"\0" + json.dumps(msgs, ensure_ascii=False).encode()
    with open(os.path.join(OUT, "seed_" + name), "wb") as f:
        f.write(data)


def main():
    d = json.load(open(os.path.join(FX, "expected.json"), encoding="utf-8"))
    convs = d["conversations"]
    for fam in d["families"]:
        src = open(os.path.join(FX, fam["template"]), encoding="utf-8").read()
        for i, (cname, msgs) in enumerate(sorted(convs.items())):
            out(f"{fam['name']}_{cname}", 2 | (i & 1), src, msgs)
    for i, s in enumerate(d["snippets"]):
        out(f"snippet_{i:02d}", i & 3, s["template"], d["snippet_messages"])
    hostile = {
        "loop": "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        "recurse": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "double": "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "repeat": "{{ 'x' * 9223372036854775807 }}",
        "deep": "{{ " + "[" * 70 + "]" * 70 + " }}",
        "unclosed": "{% if true %}{% for m in messages %}",
        "escapes": "{{ '\\u00e9\\x41\\U0001F600\\n\\t\\\\' }}{{ \"\\q\" }}",
        "slices": "{{ messages[::-1] }}{{ 'abc'[10:-10:-1] }}{{ messages[-100] }}",
        "ws": "  {%- if true -%}\n  x\n  {%+ if true +%}\n y {# c #}\n{% endif %}{% endif %}\n",
    }
    for name, src in hostile.items():
        out("hostile_" + name, 1, src)


if __name__ == "__main__":
    main()
