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
#   * logprobs=2 streamed: each chunk's tokens join to exactly its text, and all the chunks'
#     tokens, log-probabilities (to 1e-6: float32 numbers printed and read back), alternatives
#     and text offsets equal the whole answer's;
#   * echo with logprobs (max_tokens 0): the text is the prompt, its tokens join to it, the first
#     log-probability is null and the rest <= 0, offsets count the bytes before each token; the
#     prompt + the first greedy character scored this way gives that character the
#     log-probability generation gave it (within 1e-4: another batch shape, float32); with
#     max_tokens N the text is prompt + greedy text and the completion's records are the plain
#     call's, after the prompt's; streamed, the first chunk is the prompt with its records;
#   * ignore_eos (vLLM's extension, extra_body): a seeded completion that ends at the end of
#     text runs on to max_tokens with it, its text starting with the one that stopped;
#   * chat.completions.create, streamed and not: the same content both ways; with logprobs and
#     top_logprobs=2 both ways: the same tokens and log-probabilities, each streamed chunk's
#     tokens joining to its delta;
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

    # logprobs in a stream: per chunk, the tokens of its text; together, the whole answer's
    chunks = [ch for ch in c.completions.create(model=a.model, prompt=a.prompt, max_tokens=10, temperature=0,
                                                logprobs=2, stream=True) if ch.choices]
    whole = c.completions.create(model=a.model, prompt=a.prompt, max_tokens=10, temperature=0, logprobs=2)
    wl = whole.choices[0].logprobs
    toks, lps, tops, offs = [], [], [], []
    for ch in chunks:
        x = ch.choices[0]
        if x.logprobs is None:
            if x.text:
                fail(f"streamed chunk {x.text!r} without logprobs")
            continue
        if "".join(x.logprobs.tokens) != x.text:
            fail(f"streamed chunk {x.text!r} carries tokens {x.logprobs.tokens}")
        toks += x.logprobs.tokens
        lps += x.logprobs.token_logprobs
        tops += x.logprobs.top_logprobs
        offs += x.logprobs.text_offset
    if toks != wl.tokens or offs != wl.text_offset or len(lps) != len(wl.token_logprobs) or any(
            abs(p - q) > 1e-6 for p, q in zip(lps, wl.token_logprobs)) or [sorted(t) for t in tops] != [
            sorted(t) for t in wl.top_logprobs]:
        fail(f"streamed logprobs {toks} {lps} {offs} != whole {wl.tokens} {wl.token_logprobs} {wl.text_offset}")
    if "".join(ch.choices[0].text for ch in chunks) != whole.choices[0].text:
        fail("streamed text with logprobs differs from the whole answer's")
    n_checks += 1

    # echo with logprobs: the prompt's own log-probabilities
    r = c.completions.create(model=a.model, prompt=a.prompt, max_tokens=0, echo=True, logprobs=1)
    x = r.choices[0]
    lp = x.logprobs
    if x.text != a.prompt or "".join(lp.tokens) != a.prompt or lp.token_logprobs[0] is not None or any(
            v is None or v > 0 for v in lp.token_logprobs[1:]) or x.finish_reason != "length":
        fail(f"echo, max_tokens 0: {x.text!r} {lp} {x.finish_reason}")
    want_off = [len("".join(lp.tokens[:i]).encode()) for i in range(len(lp.tokens))]
    if lp.text_offset != want_off or r.usage.completion_tokens != 0:
        fail(f"echo offsets {lp.text_offset} != {want_off} (usage {r.usage})")
    first = c.completions.create(model=a.model, prompt=a.prompt, max_tokens=1, temperature=0, logprobs=1)
    g1, l1 = first.choices[0].logprobs.tokens[0], first.choices[0].logprobs.token_logprobs[0]
    sc = c.completions.create(model=a.model, prompt=a.prompt + g1, max_tokens=0, echo=True, logprobs=0)
    l_sc = sc.choices[0].logprobs.token_logprobs[-1]
    if sc.choices[0].logprobs.tokens[-1] != g1 or abs(l_sc - l1) > 1e-4:
        fail(f"scoring the prompt + {g1!r} gives it {l_sc}; generating it gave {l1}")
    n = 8
    plain = c.completions.create(model=a.model, prompt=a.prompt, max_tokens=n, temperature=0, logprobs=1)
    r = c.completions.create(model=a.model, prompt=a.prompt, max_tokens=n, temperature=0, logprobs=1, echo=True)
    x, pl = r.choices[0], plain.choices[0].logprobs
    np_ = len(lp.tokens)
    if x.text != a.prompt + plain.choices[0].text or x.logprobs.tokens != lp.tokens + pl.tokens or \
            x.logprobs.text_offset != lp.text_offset + [o + len(a.prompt.encode()) for o in pl.text_offset] or \
            any(abs(p - q) > 1e-6 for p, q in zip(x.logprobs.token_logprobs[np_:], pl.token_logprobs)):
        fail(f"echo with {n} tokens: {x.text!r} {x.logprobs} vs prompt {lp} + {pl}")
    chunks = [ch for ch in c.completions.create(model=a.model, prompt=a.prompt, max_tokens=n, temperature=0,
                                                logprobs=1, echo=True, stream=True) if ch.choices]
    c0 = chunks[0].choices[0]
    if c0.text != a.prompt or c0.logprobs is None or c0.logprobs.tokens != lp.tokens or \
            "".join(ch.choices[0].text for ch in chunks) != x.text:
        fail(f"streamed echo: first chunk {c0}, text {''.join(ch.choices[0].text for ch in chunks)!r}")
    n_checks += 1

    # ignore_eos: past the end of text (a seeded completion that stops there; the draws are keyed by seed and
    # position, so the same seed with ignore_eos gives the same tokens, the end of text among them, then more)
    for seed in range(20):
        r = c.completions.create(model=a.model, prompt=a.prompt, max_tokens=120, temperature=1, seed=seed)
        if r.choices[0].finish_reason == "stop" and r.usage.completion_tokens < 120:
            break
    else:
        fail("no seeded completion of 20 reached the end of text in 120 tokens")
    r2 = c.completions.create(model=a.model, prompt=a.prompt, max_tokens=120, temperature=1, seed=seed,
                              extra_body={"ignore_eos": True})
    if r2.usage.completion_tokens != 120 or r2.choices[0].finish_reason != "length" or \
            not r2.choices[0].text.startswith(r.choices[0].text) or len(r2.choices[0].text) <= len(r.choices[0].text):
        fail(f"ignore_eos: {r2.usage} {r2.choices[0].finish_reason} {r2.choices[0].text!r} after "
             f"{r.choices[0].text!r}")
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

    r = c.chat.completions.create(model=a.model, messages=msgs, max_tokens=10, temperature=0, logprobs=True,
                                  top_logprobs=2)
    wc = r.choices[0].logprobs.content
    got = []
    for ch in c.chat.completions.create(model=a.model, messages=msgs, max_tokens=10, temperature=0, logprobs=True,
                                        top_logprobs=2, stream=True):
        if not ch.choices:
            continue
        x = ch.choices[0]
        items = x.logprobs.content if x.logprobs is not None and x.logprobs.content else []
        if x.delta.content and "".join(t.token for t in items) != x.delta.content:
            fail(f"chat chunk {x.delta.content!r} carries {[t.token for t in items]}")
        got += items
    if [t.token for t in got] != [t.token for t in wc] or any(abs(p.logprob - q.logprob) > 1e-6 for p, q in
                                                              zip(got, wc)) or any(len(t.top_logprobs) != 2 for t in got):
        fail(f"chat logprobs streamed {[(t.token, t.logprob) for t in got]} != {[(t.token, t.logprob) for t in wc]}")
    if "".join(t.token for t in wc) != r.choices[0].message.content:
        fail(f"chat logprobs tokens {[t.token for t in wc]} do not join to {r.choices[0].message.content!r}")
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
