# Interpreter: a venv with the PyPI `openai` client (tests/cli/test_serve.sh makes one:
#   python3 -m venv ~/.cache/llmforge/openai-venv && ~/.cache/llmforge/openai-venv/bin/pip install openai;
# written against openai 3.57).
#
# check_openai_client.py -- drives a running `llmforge serve` with the real OpenAI Python client
# and checks what an application relies on. Exit 0 when every check passes; the first failure
# is printed with what was expected and what came back (exit 1).
#
#   check_openai_client.py --base-url http://127.0.0.1:PORT/v1 --key KEY --model NAME
#       --prompt TEXT --greedy-text TEXT --greedy-tokens N
#
# Checks:
#   * models.list() names the served model;
#   * completions.create (greedy, max_tokens N) returns exactly --greedy-text (what
#     `llmforge sample --temperature 0 --max-new-tokens N` printed after the prompt), with
#     finish_reason "length" and usage counting N completion tokens;
#   * the same streamed: the chunks concatenate to the same text, then the usage chunk;
#   * n=3 with a seed: three choices, indices 0..2, and the same three again for the same seed;
#   * stop: a stop string taken from the greedy text ends the text just before it,
#     finish_reason "stop";
#   * logprobs=2: one log-probability per token, each <= 0, the greedy token the most likely;
#   * chat.completions.create, streamed and not: the same content both ways;
#   * 16 concurrent streaming clients (threads), each with its own seed, each get exactly the
#     text they get alone, one at a time;
#   * a wrong key raises AuthenticationError (401).
import argparse
import concurrent.futures
import sys

import openai


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--greedy-text", required=True)
    ap.add_argument("--greedy-tokens", type=int, required=True)
    a = ap.parse_args()
    c = openai.OpenAI(base_url=a.base_url, api_key=a.key, max_retries=0, timeout=120)
    n_checks = 0

    ids = [m.id for m in c.models.list().data]
    if a.model not in ids:
        fail(f"models.list() = {ids}, no {a.model!r}")
    n_checks += 1

    r = c.completions.create(model=a.model, prompt=a.prompt, max_tokens=a.greedy_tokens, temperature=0)
    if r.choices[0].text != a.greedy_text:
        fail(f"greedy completion {r.choices[0].text!r} != llmforge sample's {a.greedy_text!r}")
    if r.choices[0].finish_reason != "length" or r.usage.completion_tokens != a.greedy_tokens:
        fail(f"finish {r.choices[0].finish_reason}, usage {r.usage}")
    n_checks += 1

    text, usage = "", None
    for ch in c.completions.create(model=a.model, prompt=a.prompt, max_tokens=a.greedy_tokens, temperature=0,
                                   stream=True, stream_options={"include_usage": True}):
        if ch.choices:
            text += ch.choices[0].text
        if ch.usage:
            usage = ch.usage
    if text != a.greedy_text or usage is None or usage.completion_tokens != a.greedy_tokens:
        fail(f"streamed greedy {text!r} (usage {usage}) != {a.greedy_text!r}")
    n_checks += 1

    def three():
        r = c.completions.create(model=a.model, prompt=a.prompt, max_tokens=12, temperature=1.0, n=3, seed=1234)
        return sorted((x.index, x.text) for x in r.choices)
    first, again = three(), three()
    if [i for i, _ in first] != [0, 1, 2] or first != again:
        fail(f"n=3 with a seed: {first} then {again}")
    n_checks += 1

    g = a.greedy_text
    cut = next((i for i in range(2, len(g)) if g[i] not in g[:i] and g[i].strip()), None)
    if cut is not None:
        stop = g[cut]
        r = c.completions.create(model=a.model, prompt=a.prompt, max_tokens=a.greedy_tokens, temperature=0,
                                 stop=[stop])
        if r.choices[0].text != g[:cut] or r.choices[0].finish_reason != "stop":
            fail(f"stop {stop!r}: {r.choices[0].text!r} ({r.choices[0].finish_reason}), want {g[:cut]!r}")
        n_checks += 1

    r = c.completions.create(model=a.model, prompt=a.prompt, max_tokens=6, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    if lp is None or len(lp.token_logprobs) != 6 or any(x > 0 for x in lp.token_logprobs):
        fail(f"logprobs: {lp}")
    for tok, top, x in zip(lp.tokens, lp.top_logprobs, lp.token_logprobs):
        if max(top.values()) > x + 1e-6:
            fail(f"greedy token {tok!r} ({x}) is not the most likely of {top}")
    n_checks += 1

    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who is there?"}]
    r = c.chat.completions.create(model=a.model, messages=msgs, max_tokens=10, temperature=0)
    whole = r.choices[0].message.content
    streamed = "".join((ch.choices[0].delta.content or "") for ch in
                       c.chat.completions.create(model=a.model, messages=msgs, max_tokens=10, temperature=0,
                                                 stream=True) if ch.choices)
    if r.choices[0].message.role != "assistant" or whole != streamed:
        fail(f"chat: {whole!r} vs streamed {streamed!r}")
    n_checks += 1

    def stream_text(seed):
        return "".join(ch.choices[0].text for ch in
                       c.completions.create(model=a.model, prompt=a.prompt, max_tokens=16, temperature=0.9,
                                            seed=seed, stream=True) if ch.choices)
    alone = [stream_text(s) for s in range(16)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as ex:
        together = list(ex.map(stream_text, range(16)))
    bad = [s for s in range(16) if alone[s] != together[s]]
    if bad:
        fail(f"16 concurrent streams: seeds {bad} differ from their solo text, e.g. {alone[bad[0]]!r} vs "
             f"{together[bad[0]]!r}")
    n_checks += 1

    try:
        openai.OpenAI(base_url=a.base_url, api_key="wrong", max_retries=0).models.list()
        fail("a wrong key was accepted")
    except openai.AuthenticationError:
        pass
    n_checks += 1
    print(f"openai {openai.__version__}: {n_checks} checks passed")


if __name__ == "__main__":
    main()
