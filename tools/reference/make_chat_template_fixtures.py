# Interpreter: the venv /root/.cache/llmforge/bench-venv (transformers 5.25, jinja2 >= 3.1.6).
# Nothing is downloaded: the templates are files in tests/fixtures/chat_templates/ (their
# sources are in that folder's README.md) and transformers renders them with its own
# render_jinja_template (what tokenizer.apply_chat_template(..., tokenize=False) calls), with
# the special tokens a tokenizer of that family passes (bos_token, eos_token).
#
# make_chat_template_fixtures.py -- writes tests/fixtures/chat_templates/expected.json:
#   {"today": "2026-12-07 12:00:00",          what strftime_now sees (datetime.now is pinned)
#    "families": [{"name", "template" (file), "vars" {bos_token, eos_token},
#                  "cases": [{"conversation", "add_generation_prompt", "expected"} or
#                            {"conversation", "add_generation_prompt", "error"}],
#                  "masks": [{"conversation", "spans": [[start, end], ...]} or
#                            {"conversation", "mask_error": message index}]}],
#    "conversations": {name: messages}}
# Spans are UTF-8 byte offsets into the rendering without the generation prompt.
#
# The assistant mask rule (llmforge's src/data/chat_jinja.c implements the same): for each
# assistant message i, P = render(m[:i], generation prompt), R = render(m[:i+1]), G =
# render(m[:i+1], generation prompt), F = render(m) (the full rendering). R and F must start
# with P, else the template has no assistant mask (mask_error = i). E = R[len(P):]; the turn is
# the longest common prefix of E, F[len(P):] and G[len(P):]; when that is shorter than E (what
# follows the turn differs with the context, e.g. an eos_token only at the end), it is cut
# back to just after its last '\n', '>' or ']'; then trailing ' ', '\t', '\r', '\n' are
# dropped. The turn so includes the end-of-turn marker (<|im_end|>, <|eot_id|>, </s>,
# <end_of_turn>, <|end|>) and not the newline after it. For the template with
# {% generation %} blocks (chatml-generation) the script checks the rule against transformers'
# return_assistant_tokens_mask indices and fails if they differ.
import datetime as _dt
import json
import os
import sys

import transformers.utils.chat_template_utils as ctu

TODAY = "2026-12-07 12:00:00"


class _PinnedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(2026, 12, 7, 12, 0, 0)


ctu.datetime = _PinnedDatetime  # strftime_now() reads the module's datetime

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "chat_templates")

FAMILIES = [
    ("qwen2.5", "qwen2.5.jinja", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    ("llama3", "llama3.jinja", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    ("mistral-v0.3", "mistral-v0.3.jinja", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    ("gemma2", "gemma2.jinja", {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}),
    ("gemma3", "gemma3.jinja", {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}),
    ("phi3", "phi3.jinja", {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"}),
    ("zephyr", "zephyr.jinja", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    ("chatml-generation", "chatml-generation.jinja", {"eos_token": "<|im_end|>"}),
]

S = {"role": "system", "content": "You are a terse assistant. Answer in one line."}
U1 = {"role": "user", "content": "  What is 2+2?  "}
A1 = {"role": "assistant", "content": "4.\n"}
U2 = {"role": "user", "content": "And in Chinese? 用中文说。 Also: <|im_end|> and </s> are just text here."}
A2 = {"role": "assistant", "content": "四 (sì). \"Quotes\", back\\slash, tab\there, ünïcödé 😀"}
U3 = {"role": "user", "content": "Thanks!"}

U4 = {"role": "user", "content": "And in Chinese? 用中文说。 Spell it out: s-i."}
CONVERSATIONS = {
    "system_multi": [S, U1, A1, U2, A2],
    "plain_multi": [U1, A1, U2, A2],
    "system_open": [S, U1, A1, U2],
    "plain_open": [U1, A1, U2, A2, U3],
    "single_user": [U1],
    "bad_order": [U1, U2],
    "tok_multi": [S, U1, A1, U4, A2],
}

# Token-level checks (tests/fixtures/hf_tok tokenizers, trained here): transformers' ids of the
# whole rendering (no special token inside message text, so recognising specials everywhere and
# in template text only agree) and the mask of the tokens inside the assistant spans.
TOKEN_CASES = [("qwen2.5", "qwen2.json"), ("llama3", "llama3.json")]


def token_case(fam_name, tok_file, fams):
    from transformers import PreTrainedTokenizerFast

    fam = next(f for f in fams if f["name"] == fam_name)
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(HERE, "..", "hf_tok", tok_file))
    msgs = CONVERSATIONS["tok_multi"]
    with open(os.path.join(HERE, fam["template"]), encoding="utf-8") as f:
        tpl = f.read()
    text = render(tpl, fam["vars"], msgs, False)
    spans, _ = assistant_spans(tpl, fam["vars"], msgs)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    raw = text.encode("utf-8")
    mask = []
    for s, e in enc["offset_mapping"]:
        bs, be = b(text, s), b(text, e)
        mask.append(int(any(a <= bs and be <= z for a, z in spans)))
    assert raw  # the spans are byte offsets of the same text
    return {"family": fam_name, "tokenizer": "hf_tok/" + tok_file, "conversation": "tok_multi",
            "ids": enc["input_ids"], "mask": mask}


# Small templates over the interpreter's features, each rendered by transformers' environment
# with messages=SNIPPET_MESSAGES (the C test renders them the same way): byte-identical or the
# same failure (raise_exception).
SNIPPET_MESSAGES = [S, U1, A1, U2]
SNIPPETS = [
    "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 * 2 }}",
    "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.0 }} {{ 3.14159 }} {{ 1e-7 }} {{ 10 / 4 }} {{ -0.5 }}",
    "{{ 'a' ~ 1 ~ none ~ true }} {{ 'x' * 3 }} {{ [1, 2] + [3] }} {{ {'k': 'v', 'n': 1} }} {{ none }} {{ true }}",
    "{{ \"it's\" }} {{ ['it\\'s', \"q\\\"\"] }} {{ 'tab\\there' | tojson }} {{ '\\u00e9\\x41\\n' }}",
    "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.first }}/{{ loop.last }}/{{ loop.revindex }} {% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }}{% if not loop.last %},{% endif %}{% else %}none{% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %}|{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% set ns = namespace(n=0, seen=false) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.seen }}",
    "{% set x = 1 %}{% for m in messages %}{% set x = 2 %}{% endfor %}{{ x }}",
    "{{ messages[1:] | length }} {{ messages[-1].role }} {{ messages[0]['content'][:8] }} {{ 'abcdef'[::-2] }} {{ 'abcdef'[-3:] }} {{ [1,2,3,4][1:3] }}",
    "[{{ messages[1].content | trim }}] [{{ messages[1].content.strip() }}] [{{ messages[1].content.lstrip() }}] [{{ messages[1].content.rstrip() }}] [{{ 'xxhixx'.strip('x') }}]",
    "{{ 'Hello World'.upper() }} {{ 'Hello'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'a-b-c'.split('-') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }}",
    "{{ 'abc'.startswith('a') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc' | replace('b', 'XX') }} {{ 'abc' | upper }} {{ 'ABC' | lower }} {{ 'abc def' | title }} {{ 'abc' | capitalize }}",
    "{{ messages | length }} {{ 'héllo' | length }} {{ messages | first }} {{ (messages | last).role }} {{ [3, 1, 2] | join(', ') }} {{ ['a', 'b'] | join }} {{ '42' | int + 1 }} {{ 'x' | int }} {{ 3.9 | int }}",
    "{{ undefined_thing | default('dflt') }} {{ '' | default('dflt') }} {{ '' | default('dflt', true) }} {{ none | string }} {{ 5 | string ~ '!' }} {{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b', 'z') }} {{ {'a': 1}.get('b') }}",
    "{{ messages[0] | tojson }}",
    "{{ {'b': [1, 2.5, none, true], 'a': {'x': 'é\"'}} | tojson(indent=2) }}",
    "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ [] | tojson }} {{ {} | tojson(indent=2) }} {{ 'a/b<c>' | tojson }}",
    "{{ x is defined }} {{ messages is defined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is not string }}",
    "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1] == [1] }} {{ 1 != 2 }}",
    "{{ 'yes' if messages else 'no' }} {{ 'yes' if [] else 'no' }} {{ ('a' if false) ~ '|' }} {{ true and 'x' }} {{ false or 'y' }} {{ not none }}",
    "A\n  {% if true %}\n  B\n  {% endif %}\n  C {{- ' D ' -}} E\n{# comment #}\nF {%- if true %} G {% endif -%} H\n",
    "{%- for m in messages %}\n    {{- m.role }}\n    {%+ if true %}x{% endif +%}\n{% endfor %}\n",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}",
    "{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %} {{ range(2, 8, 3) | list }}",
    "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | rejectattr('role', 'equalto', 'user') | list | length }} {{ (messages | selectattr('role', 'equalto', 'nobody') | list) | length }}",
    "{{ strftime_now('%Y-%m-%d %A %B') }} {{ strftime_now is defined }} {{ bos_token }}{{ eos_token }}",
    "{{ raise_exception('refused: ' ~ messages | length) }}",
    "{{ 'a' + 1 }}",
    "{{ ['x', 'y'] | reverse | list }} {{ 'abc' | reverse }} {{ -3 | abs }} {{ 'ÀB' | length }} {{ {'a': 1, 'b': 2} | items | list }} {{ 'ab' | list }}",
]


def render_snippet(tpl):
    try:
        out, _ = ctu.render_jinja_template(conversations=[SNIPPET_MESSAGES], chat_template=tpl,
                                           bos_token="<s>", eos_token="</s>")
        return {"template": tpl, "expected": out[0]}
    except Exception as e:
        return {"template": tpl, "error": f"{type(e).__name__}: {e}"}


def render(tpl, vars_, msgs, gen):
    out, _ = ctu.render_jinja_template(
        conversations=[msgs], chat_template=tpl, add_generation_prompt=gen, **vars_)
    return out[0]


def render_indices(tpl, vars_, msgs):
    out, idx = ctu.render_jinja_template(
        conversations=[msgs], chat_template=tpl, return_assistant_tokens_mask=True, **vars_)
    return out[0], idx[0]


def b(s, i):
    return len(s[:i].encode("utf-8"))


def assistant_spans(tpl, vars_, msgs):
    full = render(tpl, vars_, msgs, False)
    spans = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        P = render(tpl, vars_, msgs[:i], True)
        R = render(tpl, vars_, msgs[: i + 1], False)
        G = render(tpl, vars_, msgs[: i + 1], True)
        if not R.startswith(P) or not full.startswith(P) or not G.startswith(P):
            return None, i
        E, Fr, Gr = R[len(P):], full[len(P):], G[len(P):]
        L = 0
        while L < len(E) and L < len(Fr) and L < len(Gr) and E[L] == Fr[L] == Gr[L]:
            L += 1
        if L < len(E):
            L = max(E.rfind(ch, 0, L) for ch in "\n>]") + 1
        while L > 0 and E[L - 1] in " \t\r\n":
            L -= 1
        spans.append([b(full, len(P)), b(full, len(P) + L)])
    return spans, None


def main():
    fams = []
    for name, fname, vars_ in FAMILIES:
        with open(os.path.join(HERE, fname), encoding="utf-8") as f:
            tpl = f.read()
        cases, masks = [], []
        for cname, msgs in CONVERSATIONS.items():
            for gen in (False, True):
                c = {"conversation": cname, "add_generation_prompt": gen}
                try:
                    c["expected"] = render(tpl, vars_, msgs, gen)
                except Exception as e:  # raise_exception in the template
                    c["error"] = str(e)
                cases.append(c)
            if msgs[-1]["role"] != "assistant":
                continue
            try:
                render(tpl, vars_, msgs, False)
            except Exception:
                continue
            try:
                spans, bad = assistant_spans(tpl, vars_, msgs)
            except Exception as e:
                masks.append({"conversation": cname, "mask_error_render": str(e)})
                continue
            if spans is None:
                masks.append({"conversation": cname, "mask_error": bad})
            else:
                masks.append({"conversation": cname, "spans": spans})
                if "{% generation %}" in tpl or "{%- generation %}" in tpl:
                    text, idx = render_indices(tpl, vars_, msgs)
                    want = [[b(text, s), b(text, e)] for s, e in idx]
                    if want != spans:
                        sys.exit(f"{name}/{cname}: mask rule {spans} != transformers' generation indices {want}")
        fams.append({"name": name, "template": fname, "vars": vars_, "cases": cases, "masks": masks})
    snippets = [render_snippet(t) for t in SNIPPETS]
    token_cases = [token_case(f, t, fams) for f, t in TOKEN_CASES]
    out = {"today": TODAY, "families": fams, "conversations": CONVERSATIONS, "snippet_messages": SNIPPET_MESSAGES,
           "snippets": snippets, "token_cases": token_cases}
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n = sum(len(f["cases"]) for f in fams)
    print(f"wrote {len(fams)} families, {n} renderings, {sum(len(f['masks']) for f in fams)} masks")


if __name__ == "__main__":
    main()
