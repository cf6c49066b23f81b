# bench/serve_load.py -- the load generator of bench/serve.sh: N concurrent streaming clients
# against an OpenAI-compatible /v1/completions (llmforge serve, llama-cpp-python's server),
# bounded in requests and in time, loopback only. Run with the bench venv's python (httpx2, the
# successor of httpx, or httpx).
#
#   serve_load.py --url http://127.0.0.1:PORT/v1 --model NAME --prompts prompts.json
#       --as ids|text --clients N --requests R --duration S --max-tokens M
#       [--extra '{"ignore_eos": true}'] [--label TEXT]
#
# Each of the N clients (asyncio tasks over one connection pool of N connections) sends
# streaming completions one after another, request i with prompt i of prompts.json (each a
# 128-token prompt as token ids, and as a text that the llama.cpp tokenizer cuts into exactly
# those ids: --as picks which the server gets), greedy (temperature 0), max_tokens M, until R
# requests were sent or S seconds passed. At S seconds what is still streaming is closed; its
# tokens so far count.
# Measured, per request, from the moment it is sent: the arrival of each SSE chunk that
# carries text. Reported (one JSON line on stdout):
#   tokens         generated tokens received: the usage chunk's completion_tokens when the
#                  server sends one (llmforge, stream_options.include_usage), else the text
#                  chunks (llama-cpp-python sends a chunk per token; a token holding part of a
#                  character may share a chunk with the next) -- M for a request that ended with
#                  finish_reason "length"
#   tokens_per_s   tokens / the wall time from the first request sent to the last answer (or S)
#   ttft p50/p99   first text chunk - sent; a request still waiting for it at the cut counts
#                  with the time it waited (a lower bound: ttft_censored counts them, and
#                  ttft_pNN_censored says when such a bound is at or below the percentile, which
#                  is then a lower bound too)
#   itl p50/p99    the gaps between consecutive text chunks of one request, over all requests
#   done, cut, waiting, failed: requests finished, closed at S while streaming, closed at S before
#                  their first token, failed; short: finished with fewer than M tokens (an end
#                  of text the request did not switch off)
# Percentiles: nearest rank on the sorted values.
import argparse
import asyncio
import json
import math
import sys
import time

try:
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx


def pct(xs, p):
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


async def one(client, a, prompt, rec):
    body = {"model": a.model, "prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0, "stream": True}
    body.update(a.extra_obj)
    t0 = time.perf_counter()
    rec.update(t0=t0, times=[], chunks=0, usage=None, finish=None, state="sent")
    async with client.stream("POST", a.url + "/completions", json=body) as r:
        if r.status_code != 200:
            rec["state"] = "failed"
            rec["error"] = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
            return
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            ch = json.loads(data)
            if ch.get("usage"):
                rec["usage"] = ch["usage"]["completion_tokens"]
            for c in ch.get("choices") or []:
                if c.get("text"):
                    rec["times"].append(time.perf_counter())
                    rec["chunks"] += 1
                if c.get("finish_reason"):
                    rec["finish"] = c["finish_reason"]
    rec["state"] = "done"
    rec["t_end"] = time.perf_counter()


async def run(a):
    prompts = json.load(open(a.prompts))
    key = "ids" if a.as_ == "ids" else "text"
    recs = []
    next_i = 0
    t_start = time.perf_counter()
    deadline = t_start + a.duration
    limits = httpx.Limits(max_connections=a.clients, max_keepalive_connections=a.clients)
    async with httpx.AsyncClient(timeout=httpx.Timeout(a.duration + 60), limits=limits) as client:
        async def worker():
            nonlocal next_i
            while next_i < a.requests and time.perf_counter() < deadline:
                i = next_i
                next_i += 1
                rec = {"i": i}
                recs.append(rec)
                try:
                    await one(client, a, prompts[i % len(prompts)][key], rec)
                except Exception as e:  # noqa: BLE001 -- a failed request is counted and reported
                    rec["state"] = "failed"
                    rec["error"] = repr(e)[:200]

        tasks = [asyncio.create_task(worker()) for _ in range(a.clients)]
        done, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.perf_counter()))
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    t_stop = time.perf_counter()
    tokens, ttft, itl, censored = 0, [], [], []
    n = {"done": 0, "cut": 0, "waiting": 0, "failed": 0, "short": 0}
    last = t_start
    errors = []
    for r in recs:
        st = r.get("state")
        ts = r.get("times", [])
        if st == "failed":
            n["failed"] += 1
            errors.append(r.get("error"))
            continue
        if st == "done":
            n["done"] += 1
            last = max(last, r["t_end"])
            if r["usage"] is not None:
                got = r["usage"]
            elif r["finish"] == "length":
                got = a.max_tokens
            else:
                got = r["chunks"]
            tokens += got
            n["short"] += got < a.max_tokens
        else:
            n["cut" if ts else "waiting"] += 1
            tokens += r.get("chunks", 0)
            last = t_stop
            if not ts and "t0" in r:
                censored.append(min(t_stop, deadline) - r["t0"])
        if ts:
            ttft.append(ts[0] - r["t0"])
            itl += [y - x for x, y in zip(ts, ts[1:])]
    wall = (last if n["cut"] + n["waiting"] == 0 else min(t_stop, deadline)) - t_start
    ms = lambda v: None if v is None else round(1000 * v, 2)  # noqa: E731
    all_ttft = ttft + censored
    p50, p99 = pct(all_ttft, 50), pct(all_ttft, 99)
    out = {"label": a.label, "clients": a.clients, "requests": len(recs), **n, "tokens": tokens,
           "wall_s": round(wall, 3), "tokens_per_s": round(tokens / wall, 2) if wall > 0 else None,
           "ttft_p50_ms": ms(p50), "ttft_p99_ms": ms(p99), "ttft_censored": len(censored),
           "ttft_p50_censored": bool(censored) and min(censored) <= p50,
           "ttft_p99_censored": bool(censored) and min(censored) <= p99,
           "itl_p50_ms": ms(pct(itl, 50)), "itl_p99_ms": ms(pct(itl, 99)), "max_tokens": a.max_tokens}
    if errors:
        out["first_error"] = errors[0]
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--as", dest="as_", choices=["ids", "text"], required=True)
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--requests", type=int, required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--extra", default="{}")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    if not a.url.startswith(("http://127.0.0.1:", "http://localhost:", "http://[::1]:")):
        sys.exit("serve_load.py: loopback URLs only")
    a.extra_obj = json.loads(a.extra)
    asyncio.run(run(a))


if __name__ == "__main__":
    main()
