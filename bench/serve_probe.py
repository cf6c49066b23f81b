#!/usr/bin/env python3
"""A hostile-client probe of `llmforge serve` (issue 31's probe, committed).

Run it through bench/serve_probe.sh, which makes the tiny checkpoint and the API key file, or
directly with the `openai` venv's python (stdlib + openai only):

    python bench/serve_probe.py --llmforge build/llmforge --ckpt out/bench/serve_probe/run \
        --key-file out/bench/serve_probe/key.txt [--sections bad,load,slowloris,batch,drain] ...

The probe starts `llmforge serve` itself: a fresh server for each section (and for each drain
trial), with --max-batch 8 --max-queue 64 --threads 2 and the API key, and reads its port from
its first line. Sections (each selectable; sizes and durations are options, defaults are the
issue's sizes):

  bad        228 distinct bad requests over raw sockets (request line, methods, paths,
             headers, RFC 9112 framing, Host, body framing, chunked bodies, JSON, field types and
             ranges, sampling values, caps, auth, model). Each must be answered within --bound-s
             (or, where the table says so, closed without an answer within it: never a hang) with
             one of the statuses the table expects; every error body must be OpenAI's shape
             {"error": {"message", "type", "param", "code"}} (JSON, the four keys, message and
             type strings), except the answers libmicrohttpd gives itself before any llmforge code
             runs (its HTML pages, marked "mhd" in the table: counted and listed, not hidden);
             where the RFC requires it the connection must close (`Connection: close` and EOF);
             no second response may follow one request. The 5 valid controls run among the cases
             and 3 valid requests after them must get 200, and the server must be alive at the
             end. Then --abandon N abandoned requests
             (connect and close; part of the request line; headers only; part of the body; a whole
             request or stream closed before reading, or reset, or after its first bytes), on
             --abandon-clients connections at a time. After them: the server alive, serving, its
             KV slots and queue back to 0 (from /metrics) within 30 s, some of the whole requests
             counted by the server, and its RSS after the second half at most that after the
             first + max(4 MiB, 2%).
  load       --clients C `openai` clients for --duration D seconds, each sending requests one
             after another: completions and chat, streamed and not, seeded sampling. Every
             request must succeed with a well-formed answer (choices, text, finish_reason stop or
             length, usage). The server's VmRSS is read from /proc/PID/status every second; RSS is
             flat when the largest sample of the last 10 s is at most the largest of the 10 s
             after the warm-up (--warmup-s) plus max(4 MiB, 2%).
  slowloris  --loris S connections that send a request line and then one header byte a second
             (reconnecting when the server closes them), while a normal client sends --requests R
             requests one after another (a new connection each, 4 greedy tokens). Every normal
             request must get 200 within 30 s, and all S slow connections must be open when the
             normal client starts. Reported: p50/p99 latency, how many slow connections the
             server closed (its request deadline) and how many got 408.
  batch      16 prompts of the same length, greedy, 32 tokens with logprobs 5: each alone on an idle
             server, then the 16 together, --batch-rounds times. The text, tokens, token
             log-probabilities and top log-probabilities must be identical (the JSON numbers are
             the shortest that read back as the same double, so equal text is equal bits).
  drain      --drain-trials N trials each of
             A: --drain-s 20, the headers and 10 body bytes sent, SIGTERM, the rest 50 ms later:
                the request must get 200 and the server exit 0;
             B: --drain-s 0, 64 concurrent 80-token requests (half streamed, with usage),
                SIGTERM --drain-delay-s (0.15) s in: each a complete answer (80 tokens) or an
                explicit error (429/503 in OpenAI's shape; a stream: an error event, no [DONE],
                chunked ending clean); none "length" with fewer tokens (mislabelled), none closed
                without an answer (lost), no stream cut mid-way (truncated); exit 0;
             C: --drain-s 20, the same load: all 64 complete, exit 0.

Output: a human summary, then one JSON line of every figure (the last line of stdout). Exit 0
when every check passed; 1 when one failed (each is listed under "FAILED"); 2 on a set-up error.
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from serve_probe_http import MODEL, Closed, Conn, build_cases, controls, openai_error_shape


class Setup(Exception):
    """The probe could not run (server did not start, bad option): exit 2."""


# ---------------------------------------------------------------------------------------------
# the server under test


class Server:
    """`llmforge serve` on a free port; its output goes to a log file in --out."""

    def __init__(self, args, name, drain_s=5):
        self.log_path = os.path.join(args.out, "serve_%s.log" % name)
        cmd = [args.llmforge, "serve", "--ckpt", args.ckpt, "--port", "0", "--model-name", MODEL,
               "--api-key-file", args.key_file, "--max-batch", "8", "--max-queue", "64", "--threads",
               str(args.threads), "--drain-s", str(drain_s)] + args.serve_arg
        self.log = open(self.log_path, "wb")
        self.p = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                m = re.search(rb"http://127\.0\.0\.1:(\d+)/v1", f.read())
            if m:
                self.port = int(m.group(1))
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        self.p.kill()
        raise Setup("serve did not start: %s" % open(self.log_path, "rb").read()[-500:].decode("utf-8", "replace"))

    def alive(self):
        return self.p.poll() is None

    def rss_kib(self):
        try:
            with open("/proc/%d/status" % self.p.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def term(self, timeout=60):
        """SIGTERM and wait: the exit status (None if it had to be killed)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            rc = None
        self.log.close()
        return rc


def run_case(port, case, bound, close_wait):
    """One case: a dict of what happened and the list of its failures."""
    r = {"name": case.name, "status": None, "fail": []}
    t0 = time.monotonic()
    deadline = t0 + bound
    try:
        c = Conn(port, timeout=bound)
    except OSError as e:
        r["fail"].append("connect: %s" % e)
        return r
    try:
        for i, p in enumerate(case.parts):
            if i:
                time.sleep(0.05)
            try:
                c.s.sendall(p)
            except OSError:  # the server answered and closed while we sent (413, 431): read its answer
                break
        try:
            resp = c.response(deadline)
        except socket.timeout:
            r["hang"] = True
            r["fail"].append("no answer within %.0f s" % bound)
            return r
        except (Closed, ConnectionResetError):
            r["fail"].append("closed inside a response")
            return r
        except ValueError as e:
            r["fail"].append(str(e))
            return r
        r["s"] = round(time.monotonic() - t0, 3)
        if resp is not None and case.mhd and resp[2].startswith(b"HTTP/1."):
            # libmicrohttpd 0.9.75 writes the status line and headers of its own 400/413 twice
            # (docs/serving.md): read the second copy, which has the page
            r["doubled"] = True
            c.buf = resp[2] + c.buf
            resp = c.response(deadline)
        if resp is None:
            r["status"] = None
            if None not in case.want:
                r["fail"].append("closed without an answer")
            return r
        status, hdrs, body, _ = resp
        r["status"] = status
        if status not in case.want:
            r["fail"].append("status %d, want %s: %r" % (status, sorted(case.want, key=str), body[:160]))
        if status >= 400:
            why = openai_error_shape(body)
            if why:
                r["not_openai"] = why
                if not case.mhd:
                    r["fail"].append("error not in OpenAI's shape: " + why)
                elif not body.startswith(b"<html>"):
                    r["fail"].append("neither OpenAI's shape nor libmicrohttpd's page: %r" % body[:100])
            elif hdrs.get("content-type", [""])[0].split(";")[0] != "application/json":
                r["fail"].append("OpenAI error with Content-Type %s" % hdrs.get("content-type"))
        after = c.after(close_wait if case.close else 0.3)
        r["after"] = after
        if after == "extra":
            r["extra"] = c.buf[:120].decode("latin-1")
            if not case.extra_ok:
                r["fail"].append("bytes after the response: %r" % c.buf[:120])
        if case.close and after != "closed" and not case.extra_ok:
            r["fail"].append("connection not closed (%s)" % after)
        if case.close and "close" not in ",".join(hdrs.get("connection", [])).lower():
            r["fail"].append("no Connection: close")
        return r
    finally:
        c.close()


def good_request(port, key, timeout=60):
    """A valid request: (status, seconds)."""
    t0 = time.monotonic()
    try:
        h = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        h.request("POST", "/v1/completions", json.dumps({"model": MODEL, "prompt": "ROMEO:\n", "max_tokens": 4,
                                                         "temperature": 0}),
                  {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        resp = h.getresponse()
        body = resp.read()
        h.close()
        ok = resp.status == 200 and json.loads(body)["choices"][0]["finish_reason"] in ("stop", "length")
        return (200 if ok else resp.status), time.monotonic() - t0
    except (OSError, http.client.HTTPException, ValueError, KeyError):
        return None, time.monotonic() - t0


def metrics(port):
    """The server's gauges that must return to 0 when it is idle, and its counters."""
    h = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    h.request("GET", "/metrics")
    text = h.getresponse().read().decode()
    h.close()
    gauges, counters = {}, {"completions": 0}
    for line in text.splitlines():
        m = re.match(r'(llmforge_serve_(?:queue_depth|active_sequences|kv_slots\{state="used"\}))\s+(\S+)', line)
        if m:
            gauges[m.group(1)] = float(m.group(2))
        m = re.match(r'llmforge_serve_(prompt_tokens|completion_tokens)_total\s+(\S+)', line)
        if m:
            counters[m.group(1)] = int(float(m.group(2)))
        m = re.match(r'llmforge_serve_requests_total\{endpoint="/v1/completions",status="\d+"\}\s+(\S+)', line)
        if m:
            counters["completions"] += int(float(m.group(1)))
    return gauges, counters


# ---------------------------------------------------------------------------------------------
# sections


def section_bad(args, key, fails):
    cases = build_cases(key)
    ctl = controls(key)
    srv = Server(args, "bad")
    out = {"cases": len(cases)}
    try:
        results = []
        with ThreadPoolExecutor(args.parallel) as ex:
            futs = [ex.submit(run_case, srv.port, c, args.bound_s, 2.0) for c in cases + ctl]
            for i, f in enumerate(futs):
                results.append(f.result())
                if i % 20 == 19 and not srv.alive():
                    break
        alive = srv.alive()
        bad_r, ctl_r = results[:len(cases)], results[len(cases):]
        served = sum(1 for _ in range(3) if good_request(srv.port, key)[0] == 200)
        out.update(
            ok=sum(1 for r in bad_r if not r["fail"]),
            failed=sum(1 for r in bad_r if r["fail"]),
            hangs=sum(1 for r in bad_r if r.get("hang")),
            crashes=0 if alive else 1,
            closed_without_answer=sum(1 for r in bad_r if r["status"] is None and not r.get("hang")),
            error_answers=sum(1 for r in bad_r if r["status"] and r["status"] >= 400),
            not_openai_shape=sum(1 for r in bad_r if r.get("not_openai")),
            not_openai_shape_llmforge=sum(1 for r, c in zip(bad_r, cases) if r.get("not_openai") and not c.mhd),
            not_openai_shape_mhd=sorted({"%s %s" % (r["status"], r["name"]) for r, c in zip(bad_r, cases)
                                         if r.get("not_openai") and c.mhd}),
            doubled_by_mhd=sorted(r["name"] for r in bad_r if r.get("doubled")),
            statuses={str(k): v for k, v in sorted(
                ((s, sum(1 for r in bad_r if r["status"] == s)) for s in {r["status"] for r in bad_r}),
                key=lambda kv: str(kv[0]))},
            controls_ok=sum(1 for r in ctl_r if not r["fail"]), controls=len(ctl_r),
            slowest_s=max((r.get("s", 0) for r in bad_r), default=0))
        for r in bad_r + ctl_r:
            if r["fail"]:
                fails.append("bad: %s: %s" % (r["name"], "; ".join(r["fail"])))
        if not alive:
            fails.append("bad: the server died (exit %s); see %s" % (srv.p.poll(), srv.log_path))
        if served != 3:
            fails.append("bad: %d of 3 valid requests answered 200 after the cases" % served)
        out["good_after"] = served
        if alive:
            out["abandoned"] = abandon(args, srv, key, fails)
    finally:
        out["exit"] = srv.term()
    if out["exit"] != 0:
        fails.append("bad: the server exited %s on SIGTERM" % out["exit"])
    return out


def abandon(args, srv, key, fails):
    """args.abandon abandoned requests; then the server must be alive, serving and idle."""
    K = ("Authorization: Bearer %s\r\n" % key).encode()
    B = json.dumps({"model": MODEL, "prompt": "ROMEO:\n", "max_tokens": 16, "temperature": 0.8}).encode()
    S = json.dumps({"model": MODEL, "prompt": "ROMEO:\n", "max_tokens": 16, "temperature": 0.8, "stream": True}).encode()
    full = b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + K + b"Content-Length: %d\r\n\r\n" % len(B) + B
    fulls = b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + K + b"Content-Length: %d\r\n\r\n" % len(S) + S
    kinds = [
        ("connect, close", lambda c: None, False),
        ("part of the request line", lambda c: c.s.sendall(b"POST /v1/compl"), False),
        ("headers, no body", lambda c: c.s.sendall(full[:full.index(b"\r\n\r\n") + 4]), False),
        ("part of the body", lambda c: c.s.sendall(full[:len(full) - 10]), False),
        ("whole request, closed before reading", lambda c: c.s.sendall(full), False),
        ("whole stream request, closed before reading", lambda c: c.s.sendall(fulls), False),
        ("whole request, reset", lambda c: c.s.sendall(full), True),
        ("stream, reset after its first bytes", lambda c: (c.s.sendall(fulls), c.s.recv(64)), True),
    ]
    counts = {k[0]: 0 for k in kinds}
    errors = []
    rss0 = srv.rss_kib()
    c0 = metrics(srv.port)[1]
    t0 = time.monotonic()

    def one(i):
        name, act, reset = kinds[i % len(kinds)]
        try:
            c = Conn(srv.port, timeout=10)
            act(c)
            c.close(reset=reset)
        except OSError as e:
            errors.append("%s: %s" % (name, e))
            return
        counts[name] += 1

    # two halves: a leak grows with the requests, a warm-up does not
    half = args.abandon // 2
    with ThreadPoolExecutor(args.abandon_clients) as ex:
        list(ex.map(one, range(half)))
        rss_half = srv.rss_kib()
        list(ex.map(one, range(half, args.abandon)))
    secs = time.monotonic() - t0
    alive = srv.alive()
    idle, m, c1 = False, {}, c0
    end = time.monotonic() + 30
    while alive and time.monotonic() < end:
        m, c1 = metrics(srv.port)
        if m and all(v == 0 for v in m.values()):
            idle = True
            break
        time.sleep(0.5)
    st, lat = good_request(srv.port, key) if alive else (None, 0)
    out = {"requests": args.abandon, "sent": sum(counts.values()), "connect_errors": len(errors), "s": round(secs, 1),
           "alive": alive, "idle_after": idle, "good_after_s": round(lat, 3), "rss_before_mib": mib(rss0),
           "rss_half_mib": mib(rss_half), "rss_after_mib": mib(srv.rss_kib()), "kinds": len(kinds),
           # whole requests the server took (the rest never arrived whole), and the tokens it
           # generated for them: up to 16 each had nobody cancelled them
           "admitted": c1["completions"] - c0["completions"],
           "tokens_generated": c1["completion_tokens"] - c0["completion_tokens"]}
    if not alive:
        fails.append("abandoned: the server died during %d abandoned requests" % args.abandon)
    if alive and not idle:
        fails.append("abandoned: KV slots/queue not back to 0 within 30 s: %s" % m)
    if alive and st != 200:
        fails.append("abandoned: a valid request afterwards got %s" % st)
    if rss_half is not None and out["rss_after_mib"] is not None:
        out["rss_flat"] = srv.rss_kib() <= rss_half + max(4096, 0.02 * rss_half)
        if not out["rss_flat"]:
            fails.append("abandoned: RSS grew from %s MiB after the first half to %s MiB after the second" %
                         (out["rss_half_mib"], out["rss_after_mib"]))
    if alive and out["admitted"] == 0:
        fails.append("abandoned: the server counted none of the whole requests: the probe did not reach it")
    if errors:
        fails.append("abandoned: %d connections failed (%s)" % (len(errors), errors[0]))
    return out


def mib(kib):
    return None if kib is None else round(kib / 1024, 1)


def section_load(args, key, fails):
    import openai  # the venv's client; imported here so that the other sections need only stdlib
    srv = Server(args, "load")
    url = "http://127.0.0.1:%d/v1" % srv.port
    rss = []
    done = threading.Event()
    ok = [0] * args.clients
    by_kind = {k: 0 for k in ("completion", "completion stream", "chat", "chat stream")}
    failed = []
    prompts = ["ROMEO:\n", "JULIET:\nO ", "First Citizen:\n", "MENENIUS:\nWhat ", "To be, or not"]

    def sampler():
        t0 = time.monotonic()
        while not done.is_set():
            rss.append((time.monotonic() - t0, srv.rss_kib()))
            done.wait(1.0)

    def check(kind, r, max_tokens):
        # "stop" may come at once (the character vocabulary's end of text is "\n"); a "length"
        # must have all max_tokens tokens (the prompts are far from the context)
        if kind.startswith("completion"):
            assert isinstance(r["text"], str), r
        assert r["finish"] in ("stop", "length"), r
        assert r["finish"] == "stop" or r["tokens"] == max_tokens, (r, max_tokens)

    def client(i, stop_at):
        cl = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=120)
        k = i
        while time.monotonic() < stop_at:
            kind = list(by_kind)[k % 4]
            k += 1
            mt = 8 + (k * 7) % 25
            p = prompts[k % len(prompts)]
            try:
                if kind == "completion":
                    x = cl.completions.create(model=MODEL, prompt=p, max_tokens=mt, temperature=0.8, seed=k)
                    r = {"text": x.choices[0].text, "finish": x.choices[0].finish_reason,
                         "tokens": x.usage.completion_tokens}
                elif kind == "completion stream":
                    text, fin, toks = "", None, 0
                    for ch in cl.completions.create(model=MODEL, prompt=p, max_tokens=mt, temperature=0.8, seed=k,
                                                    stream=True, stream_options={"include_usage": True}):
                        if ch.choices:
                            text += ch.choices[0].text
                            fin = ch.choices[0].finish_reason or fin
                        if ch.usage:
                            toks = ch.usage.completion_tokens
                    r = {"text": text, "finish": fin, "tokens": toks}
                elif kind == "chat":
                    x = cl.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": p}],
                                                   max_tokens=mt, temperature=0.8, seed=k)
                    r = {"text": x.choices[0].message.content, "finish": x.choices[0].finish_reason,
                         "tokens": x.usage.completion_tokens}
                else:
                    fin, toks = None, 0
                    for ch in cl.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": p}],
                                                         max_tokens=mt, temperature=0.8, seed=k, stream=True,
                                                         stream_options={"include_usage": True}):
                        if ch.choices:
                            fin = ch.choices[0].finish_reason or fin
                        if ch.usage:
                            toks = ch.usage.completion_tokens
                    r = {"text": None, "finish": fin, "tokens": toks}
                check(kind, r, mt)
                ok[i] += 1
                by_kind[kind] += 1
            except Exception as e:  # noqa: BLE001 (every failure counts, whatever raised it)
                failed.append("%s: %s" % (kind, repr(e)[:200]))

    try:
        th = threading.Thread(target=sampler)
        th.start()
        t0 = time.monotonic()
        stop_at = t0 + args.duration
        cs = [threading.Thread(target=client, args=(i, stop_at)) for i in range(args.clients)]
        for c in cs:
            c.start()
        for c in cs:
            c.join()
        secs = time.monotonic() - t0
        done.set()
        th.join()
        alive = srv.alive()
    finally:
        code = srv.term()
    vals = [(t, v) for t, v in rss if v is not None]
    w = args.warmup_s
    first = [v for t, v in vals if w <= t < w + 10]
    last = [v for t, v in vals if t >= args.duration - 10]
    flat = None
    if first and last:
        flat = max(last) <= max(first) + max(4096, 0.02 * max(first))
    out = {"clients": args.clients, "duration_s": args.duration, "wall_s": round(secs, 1),
           "requests": sum(ok) + len(failed), "ok": sum(ok), "failed": len(failed), "by_kind": by_kind,
           "requests_per_s": round((sum(ok) + len(failed)) / secs, 1),
           "rss_first_mib": mib(vals[0][1]) if vals else None, "rss_last_mib": mib(vals[-1][1]) if vals else None,
           "rss_max_mib": mib(max(v for _, v in vals)) if vals else None,
           "rss_max_after_warmup_10s_mib": mib(max(first)) if first else None,
           "rss_max_last_10s_mib": mib(max(last)) if last else None, "rss_flat": flat, "rss_samples": len(vals),
           "rss_max_by_10s_mib": [mib(max(v for t, v in vals if k <= t < k + 10))
                                  for k in range(0, int(vals[-1][0]) + 1, 10) if any(k <= t < k + 10 for t, _ in vals)]
           if vals else [],
           "exit": code}
    if failed:
        fails.append("load: %d of %d requests failed, first: %s" % (len(failed), out["requests"], failed[0]))
    if not alive:
        fails.append("load: the server died")
    if flat is None:
        fails.append("load: too few RSS samples to judge (duration %s s, warm-up %s s)" % (args.duration, w))
    elif not flat:
        fails.append("load: RSS grew: %s MiB in the 10 s after warm-up, %s MiB in the last 10 s" %
                     (out["rss_max_after_warmup_10s_mib"], out["rss_max_last_10s_mib"]))
    if any(ok[i] == 0 for i in range(args.clients)):
        fails.append("load: %d clients completed no request" % sum(1 for v in ok if v == 0))
    if code != 0:
        fails.append("load: the server exited %s on SIGTERM" % code)
    return out


def section_slowloris(args, key, fails):
    srv = Server(args, "slowloris")
    stop = threading.Event()
    st = {"opened": 0, "open": 0, "closed_by_server": 0, "got_408": 0}
    lock = threading.Lock()

    def loris():
        while not stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nX-Slow: ")
            except OSError:
                stop.wait(1)
                continue
            with lock:
                st["opened"] += 1
                st["open"] += 1
            while not stop.wait(1.0):
                try:
                    s.sendall(b"a")
                    s.settimeout(0.001)
                    d = s.recv(4096)  # an answer (408) or EOF: the server closed it
                    with lock:
                        st["got_408"] += d.startswith(b"HTTP/1.1 408")
                    break
                except socket.timeout:
                    continue
                except OSError:
                    break
            else:
                s.close()
                with lock:
                    st["open"] -= 1
                return
            s.close()
            with lock:
                st["open"] -= 1
                st["closed_by_server"] += 1

    ths = [threading.Thread(target=loris) for _ in range(args.loris)]
    lat, failures = [], 0
    try:
        for t in ths:
            t.start()
        end = time.monotonic() + 10
        while st["open"] < args.loris and time.monotonic() < end:
            time.sleep(0.05)
        open_at_start = st["open"]
        time.sleep(1.5)  # they have each sent a byte or two
        min_open = args.loris
        for _ in range(args.requests):
            code, secs = good_request(srv.port, key, timeout=30)
            lat.append(secs)
            failures += code != 200
            min_open = min(min_open, st["open"])
            time.sleep(0.05)
    finally:
        stop.set()
        for t in ths:
            t.join()
        alive = srv.alive()
        code = srv.term()
    lat.sort()
    q = lambda p: round(1000 * lat[min(len(lat) - 1, int(p * len(lat)))], 1) if lat else None  # noqa: E731
    out = {"slow_clients": args.loris, "open_at_start": open_at_start, "min_open": min_open,
           "slow_connections_opened": st["opened"], "closed_by_server": st["closed_by_server"],
           "got_408": st["got_408"], "requests": args.requests, "failed": failures,
           "p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": round(1000 * lat[-1], 1) if lat else None, "exit": code}
    if open_at_start < args.loris:
        fails.append("slowloris: only %d of %d slow connections were open when the normal client began" %
                     (open_at_start, args.loris))
    if failures:
        fails.append("slowloris: %d of %d normal requests failed" % (failures, args.requests))
    if not alive or code != 0:
        fails.append("slowloris: the server died or exited %s" % code)
    return out


def section_batch(args, key, fails):
    srv = Server(args, "batch")
    prompts = ["ROMEO:\n" + c * 4 for c in "abcdefghijklmnop"]  # 16 prompts of 11 characters

    def ask(p):
        h = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
        h.request("POST", "/v1/completions", json.dumps({"model": MODEL, "prompt": p, "max_tokens": 32,
                                                         "temperature": 0, "logprobs": 5, "ignore_eos": True}),
                  {"Authorization": "Bearer " + key})
        r = h.getresponse()
        body = r.read()
        h.close()
        if r.status != 200:
            return "status %d: %r" % (r.status, body[:200])
        ch = json.loads(body)["choices"][0]
        return json.dumps({"text": ch["text"], "logprobs": ch["logprobs"]}, sort_keys=True)

    try:
        alone = [ask(p) for p in prompts]
        mism, total = 0, 0
        for _ in range(args.batch_rounds):
            bar = threading.Barrier(len(prompts))
            got = [None] * len(prompts)

            def one(i):
                bar.wait()
                got[i] = ask(prompts[i])

            ths = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
            for t in ths:
                t.start()
            for t in ths:
                t.join()
            total += len(prompts)
            mism += sum(1 for a, b in zip(alone, got) if a != b)
        errors = sum(1 for a in alone if a.startswith("status"))
    finally:
        code = srv.term()
    out = {"prompts": len(prompts), "rounds": args.batch_rounds, "compared": total, "mismatches": mism,
           "errors_alone": errors, "exit": code}
    if errors:
        fails.append("batch: %d solo requests failed: %s" % (errors, [a for a in alone if a.startswith("status")][0]))
    if mism:
        fails.append("batch: %d of %d batched answers differ from the same request alone" % (mism, total))
    return out


# -- drain


def classify(stream, data, err):
    """A drain trial's request: complete, 503/429, stream error, refused (never accepted), or a
    defect: MISLABELLED, LOST, TRUNCATED, BAD."""
    if err == "refused":
        return "refused"
    if not data:
        return "LOST"
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ")[1])
    except (IndexError, ValueError):
        return "BAD"
    if status in (429, 503):
        return "error %d" % status if openai_error_shape(body) is None else "BAD"
    if status != 200:
        return "BAD"
    if not stream:
        try:
            j = json.loads(body)
        except ValueError:
            return "TRUNCATED"
        if j["usage"]["completion_tokens"] == 80:
            return "complete"
        return "MISLABELLED" if j["choices"][0]["finish_reason"] == "length" else "BAD"
    raw, text, ended = body, b"", False
    while raw:
        size_line, _, rest = raw.partition(b"\r\n")
        try:
            n = int(size_line.split(b";")[0], 16)
        except ValueError:
            break
        if n == 0:
            ended = True
            break
        text += rest[:n]
        raw = rest[n + 2:]
    events = [line[6:] for line in text.split(b"\n") if line.startswith(b"data: ")]
    if not ended:
        return "TRUNCATED"
    if events and events[-1] == b"[DONE]":
        usage = [json.loads(e)["usage"] for e in events[:-1] if b'"usage":{' in e]
        return "complete" if usage and usage[-1]["completion_tokens"] == 80 else "MISLABELLED"
    if events and events[-1].startswith(b'{"error"') and openai_error_shape(events[-1]) is None:
        return "MISLABELLED" if any(b'"finish_reason":"length"' in e for e in events) else "stream error"
    return "TRUNCATED"


def read_all(s):
    d = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return d, None
            d += b
    except OSError as e:
        return d, str(e)


def drain_load(args, key, drain_s, name):
    srv = Server(args, name, drain_s)
    res = [None] * 64
    K = ("Authorization: Bearer %s\r\n" % key).encode()

    def one(i):
        stream = i % 2 == 1
        d = {"model": MODEL, "prompt": "ROMEO:\n", "max_tokens": 80, "temperature": 1.0, "seed": i,
             "ignore_eos": True, "stream": stream}
        if stream:
            d["stream_options"] = {"include_usage": True}
        body = json.dumps(d).encode()
        try:
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        except OSError:
            res[i] = "refused"
            return
        try:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + K + b"Connection: close\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
        except OSError:
            pass
        data, err = read_all(s)
        s.close()
        res[i] = classify(stream, data, err)

    th = [threading.Thread(target=one, args=(i,)) for i in range(64)]
    for t in th:
        t.start()
    time.sleep(args.drain_delay_s)
    t0 = time.monotonic()
    srv.p.send_signal(signal.SIGTERM)
    for t in th:
        t.join()
    rc = srv.term(timeout=drain_s + 60)
    return res, rc, time.monotonic() - t0


def drain_partial(args, key):
    srv = Server(args, "drain_A", 20)
    K = ("Authorization: Bearer %s\r\n" % key).encode()
    B = json.dumps({"model": MODEL, "prompt": "ROMEO:\n", "max_tokens": 5, "temperature": 0}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + K + b"Connection: close\r\nContent-Length: %d\r\n\r\n"
              % len(B) + B[:10])
    time.sleep(0.1)
    srv.p.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    try:
        s.sendall(B[10:])
    except OSError:
        pass
    data, err = read_all(s)
    s.close()
    rc = srv.term(timeout=60)
    if not data:
        return "no response (%s)" % (err or "closed"), rc
    status = data.split(b"\r\n")[0].decode("latin-1")
    if status.startswith("HTTP/1.1 200"):
        try:
            j = json.loads(data.partition(b"\r\n\r\n")[2])
            if j["usage"]["completion_tokens"] < 1:
                status += " (empty)"
        except (ValueError, KeyError):
            status += " (body not JSON)"
    return status, rc


def section_drain(args, key, fails):
    out = {"trials": args.drain_trials, "A": {}, "B": {}, "C": {}, "B_max_exit_s": 0.0, "C_max_exit_s": 0.0}

    def bump(d, k, n=1):
        d[k] = d.get(k, 0) + n

    for _ in range(args.drain_trials):
        status, rc = drain_partial(args, key)
        bump(out["A"], "%s, exit %s" % (status, rc))
        for name, drain in (("B", 0), ("C", 20)):
            res, rc, secs = drain_load(args, key, drain, "drain_" + name)
            for r in res:
                bump(out[name], r)
            bump(out[name], "exit %s" % rc)
            out[name + "_max_exit_s"] = round(max(out[name + "_max_exit_s"], secs), 2)
    n = args.drain_trials
    a_ok = out["A"].get("HTTP/1.1 200 OK, exit 0", 0)
    if a_ok != n:
        fails.append("drain A: %d of %d trials got 200 and exit 0: %s" % (a_ok, n, out["A"]))
    for k in ("MISLABELLED", "LOST", "TRUNCATED", "BAD"):
        if out["B"].get(k):
            fails.append("drain B: %d %s" % (out["B"][k], k))
    if out["B"].get("exit 0", 0) != n:
        fails.append("drain B: exits %s" % {k: v for k, v in out["B"].items() if k.startswith("exit")})
    if out["C"].get("complete", 0) != 64 * n or out["C"].get("exit 0", 0) != n:
        fails.append("drain C: %s (want %d complete, %d exit 0)" % (out["C"], 64 * n, n))
    return out


# ---------------------------------------------------------------------------------------------


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def summary(res, fails):
    p = print
    if "bad" in res:
        b = res["bad"]
        p("bad requests: %d cases, %d ok, %d failed; crashes %d, hangs %d; %d closed without an answer (allowed "
          "there); %d controls of %d answered 200" % (b["cases"], b["ok"], b["failed"], b["crashes"], b["hangs"],
                                                      b["closed_without_answer"], b["controls_ok"], b["controls"]))
        p("  statuses %s; errors not in OpenAI's shape: %d from llmforge's code, %d libmicrohttpd's own HTML "
          "pages (%s)" % (b["statuses"], b["not_openai_shape_llmforge"], len(b["not_openai_shape_mhd"]),
                          ", ".join(b["not_openai_shape_mhd"])))
        if b["doubled_by_mhd"]:
            p("  libmicrohttpd wrote its status line and headers twice for: %s" % ", ".join(b["doubled_by_mhd"]))
        a = b.get("abandoned")
        if a:
            p("abandoned requests: %d (%d kinds) in %.1f s, %d taken whole by the server, %d tokens generated for "
          "them (at most %d); server alive %s, KV slots and queue back to 0 %s, a valid request then took %.0f ms; "
          "RSS %s MiB before, %s after the first half, %s after the second: %s" % (
              a["sent"], a["kinds"], a["s"], a["admitted"], a["tokens_generated"], 16 * a["admitted"], a["alive"],
              a["idle_after"], 1000 * a["good_after_s"], a["rss_before_mib"], a["rss_half_mib"], a["rss_after_mib"],
              "flat" if a.get("rss_flat") else "NOT flat"))
    if "load" in res:
        x = res["load"]
        p("load: %d openai clients for %d s: %d requests (%.1f/s), %d failed; by kind %s" % (
            x["clients"], x["duration_s"], x["requests"], x["requests_per_s"], x["failed"], x["by_kind"]))
        p("  RSS first %s, last %s, max %s MiB; max of the 10 s after warm-up %s, of the last 10 s %s: %s" % (
            x["rss_first_mib"], x["rss_last_mib"], x["rss_max_mib"], x["rss_max_after_warmup_10s_mib"],
            x["rss_max_last_10s_mib"], "flat" if x["rss_flat"] else "NOT flat"))
        p("  RSS, the largest of each 10 s: %s MiB" % " ".join(str(v) for v in x["rss_max_by_10s_mib"]))
    if "slowloris" in res:
        x = res["slowloris"]
        p("slowloris: %d slow connections (%d open at the start, at least %d throughout; %d opened in all, %d closed "
          "by the server, %d with 408); normal client: %d requests, %d failed, p50 %s ms, p99 %s ms, max %s ms" % (
              x["slow_clients"], x["open_at_start"], x["min_open"], x["slow_connections_opened"],
              x["closed_by_server"], x["got_408"], x["requests"], x["failed"], x["p50_ms"], x["p99_ms"], x["max_ms"]))
    if "batch" in res:
        x = res["batch"]
        p("batch invariance: %d prompts alone vs %d at once, %d rounds: %d of %d answers differ (text, tokens, "
          "log-probabilities)" % (x["prompts"], x["prompts"], x["rounds"], x["mismatches"], x["compared"]))
    if "drain" in res:
        x = res["drain"]
        p("drain, %d trials each:" % x["trials"])
        p("  A (--drain-s 20, partial body across SIGTERM): %s" % x["A"])
        p("  B (--drain-s 0, 64 x 80 tokens, SIGTERM at %.2f s): %s; exit within %.2f s" % (
            res["options"]["drain_delay_s"], x["B"], x["B_max_exit_s"]))
        p("  C (--drain-s 20, same load): %s; exit within %.2f s" % (x["C"], x["C_max_exit_s"]))
    p("(%s, %d CPUs, load average %s at the start; %.0f s)" % (res["cpu"], res["cpus"], " ".join(res["loadavg"]),
                                                             res["wall_s"]))
    if fails:
        p("FAILED (%d):" % len(fails))
        for f in fails:
            p("  " + f)
    else:
        p("every check passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llmforge", required=True, help="the llmforge binary")
    ap.add_argument("--ckpt", required=True, help="the run or step directory to serve")
    ap.add_argument("--key-file", required=True, help="the API key file the server is given")
    ap.add_argument("--out", default="out/bench/serve_probe", help="where the server logs go")
    ap.add_argument("--sections", default="bad,load,slowloris,batch,drain")
    ap.add_argument("--threads", type=int, default=2, help="the server's --threads")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="one more argument for `llmforge serve` (repeat it), e.g. --serve-arg=--batch-variant")
    ap.add_argument("--parallel", type=int, default=16, help="bad: cases run at once")
    ap.add_argument("--bound-s", type=float, default=20.0,
                    help="bad: an answer (or close) must come within this (the request deadline is 10 s)")
    ap.add_argument("--abandon", type=int, default=4000, help="bad: abandoned requests")
    ap.add_argument("--abandon-clients", type=int, default=32, help="bad: abandoned connections at a time")
    ap.add_argument("--clients", type=int, default=64, help="load: openai clients")
    ap.add_argument("--duration", type=float, default=60.0, help="load: seconds")
    ap.add_argument("--warmup-s", type=float, default=10.0, help="load: RSS samples before this are the warm-up")
    ap.add_argument("--loris", type=int, default=32, help="slowloris: slow connections")
    ap.add_argument("--requests", type=int, default=200, help="slowloris: normal requests")
    ap.add_argument("--batch-rounds", type=int, default=3, help="batch: rounds of 16 concurrent requests")
    ap.add_argument("--drain-trials", type=int, default=5, help="drain: trials of each of A, B, C")
    ap.add_argument("--drain-delay-s", type=float, default=0.15, help="drain: SIGTERM this long after B/C's start")
    args = ap.parse_args()
    sections = [s for s in args.sections.split(",") if s]
    known = ("bad", "load", "slowloris", "batch", "drain")
    unknown = [s for s in sections if s not in known]
    if unknown:
        ap.error("unknown section(s) %s; known: %s" % (unknown, ",".join(known)))
    if "load" in sections and args.duration < args.warmup_s + 20:
        ap.error("--duration must be at least --warmup-s + 20 (RSS compares two 10 s windows)")
    os.makedirs(args.out, exist_ok=True)
    with open(args.key_file) as f:
        key = f.read().strip()
    res = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu_name(), "cpus": os.cpu_count(),
           "loadavg": open("/proc/loadavg").read().split()[:3],
           "options": {k: v for k, v in vars(args).items() if k not in ("llmforge", "ckpt", "key_file", "out")}}
    fails = []
    t0 = time.monotonic()
    fn = {"bad": section_bad, "load": section_load, "slowloris": section_slowloris, "batch": section_batch,
          "drain": section_drain}
    try:
        for s in sections:
            print("== %s" % s, flush=True)
            res[s] = fn[s](args, key, fails)
    except Setup as e:
        print("serve_probe: %s" % e, file=sys.stderr)
        return 2
    res["wall_s"] = round(time.monotonic() - t0, 1)
    res["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    res["failed_checks"] = fails
    summary(res, fails)
    print(json.dumps(res, sort_keys=True))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
