"""Raw HTTP over a socket and the bad-request table of bench/serve_probe.py (its `bad`
section): a response reader that tells a close from a hang and sees bytes after a response,
OpenAI's error shape, and the cases with what each must get. Stdlib only."""
import json
import re
import socket
import time

MODEL = "probe"  # the --model-name the probe gives the server

# ---------------------------------------------------------------------------------------------
# raw HTTP over a socket


class Closed(Exception):
    pass


class Conn:
    def __init__(self, port, timeout=10):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def recv(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout()
        self.s.settimeout(left)
        return self.s.recv(65536)

    def fill(self, n, deadline):
        while len(self.buf) < n:
            b = self.recv(deadline)
            if not b:
                raise Closed()
            self.buf += b

    def line(self, deadline):
        while b"\r\n" not in self.buf:
            b = self.recv(deadline)
            if not b:
                raise Closed()
            self.buf += b
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def take(self, n):
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self, deadline):
        """One response: (status, {name: [values]}, body, chunked_ended), or None when the server
        closed before sending a byte. 1xx responses are skipped. Raises socket.timeout, Closed
        (closed inside a response), ValueError (not HTTP)."""
        while True:
            while b"\r\n\r\n" not in self.buf:
                try:
                    b = self.recv(deadline)
                except ConnectionResetError:
                    b = b""
                if not b:
                    if self.buf:
                        raise Closed()
                    return None
                self.buf += b
            raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
            lines = raw.split(b"\r\n")
            m = re.match(rb"HTTP/1\.[01] (\d{3})(?: |$)", lines[0])
            if not m:
                raise ValueError("not an HTTP status line: %r" % lines[0][:80])
            status = int(m.group(1))
            hdrs = {}
            for line in lines[1:]:
                k, _, v = line.partition(b":")
                hdrs.setdefault(k.strip().lower().decode("latin-1"), []).append(v.strip().decode("latin-1"))
            if 100 <= status < 200:
                continue
            break
        body, ended = b"", None
        if status in (204, 304):
            pass
        elif "content-length" in hdrs:
            n = int(hdrs["content-length"][0])
            self.fill(n, deadline)
            body = self.take(n)
        elif "chunked" in ",".join(hdrs.get("transfer-encoding", [])).lower():
            ended = False
            while True:
                size = int(self.line(deadline).split(b";")[0], 16)
                if size == 0:
                    while self.line(deadline):  # trailers, then the empty line
                        pass
                    ended = True
                    break
                self.fill(size + 2, deadline)
                body += self.take(size)
                self.take(2)
        else:
            while True:
                b = self.recv(deadline)
                if not b:
                    break
                body += b
        return status, hdrs, body, ended

    def after(self, wait):
        """What follows a response: "closed", "open" (nothing within wait) or "extra" (more bytes)."""
        if self.buf:
            return "extra"
        try:
            self.s.settimeout(wait)
            b = self.s.recv(65536)
        except socket.timeout:
            return "open"
        except OSError:
            return "closed"
        if not b:
            return "closed"
        self.buf += b
        return "extra"

    def close(self, reset=False):
        try:
            if reset:  # RST instead of FIN
                self.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.s.close()
        except OSError:
            pass


def openai_error_shape(body):
    """None when body is OpenAI's error object, else why not."""
    try:
        j = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "not JSON: %r" % body[:100]
    if not isinstance(j, dict) or set(j) != {"error"} or not isinstance(j["error"], dict):
        return "not {\"error\": {...}}: %r" % body[:100]
    e = j["error"]
    if set(e) != {"message", "type", "param", "code"}:
        return "error keys %s" % sorted(e)
    if not isinstance(e["message"], str) or not e["message"] or not isinstance(e["type"], str):
        return "message/type not strings: %r" % body[:100]
    if not (e["param"] is None or isinstance(e["param"], str)) or not (e["code"] is None or isinstance(e["code"], str)):
        return "param/code not string or null: %r" % body[:100]
    return None


# ---------------------------------------------------------------------------------------------
# the bad-request table


class Case:
    """A raw request and what must happen. want: statuses allowed (None: closed without an
    answer, allowed only where listed); close: the connection must close after the answer;
    mhd: libmicrohttpd answers it itself (an HTML body); extra_ok: bytes after the body are
    allowed (the body's tail is read as another request); parts: bytes sent with a pause
    between, to cross the server's reads."""

    def __init__(self, name, raw, want, close=False, mhd=False, extra_ok=False):
        self.name, self.want, self.close, self.mhd, self.extra_ok = name, set(want), close, mhd, extra_ok
        self.parts = raw if isinstance(raw, list) else [raw]


def Lit(text):
    """A JSON number written as text (1e999 reads as infinity on the server's side)."""
    return "\u0000lit:" + text + "\u0000"


def build_cases(key):
    K = ("Authorization: Bearer %s\r\n" % key).encode()
    H = b"Host: t\r\n"

    def req(method=b"POST", path=b"/v1/completions", headers=b"", body=None, version=b"HTTP/1.1", auth=True,
            host=True, cl=True):
        h = method + b" " + path + b" " + version + b"\r\n" + (H if host else b"") + (K if auth else b"") + headers
        if body is not None and cl:
            h += b"Content-Length: %d\r\n" % len(body)
        return h + b"\r\n" + (body or b"")

    def dumps(d):  # JSON text; Lit("1e999") is written as it stands (json.dumps would write Infinity)
        return re.sub(r'"\\u0000lit:(.*?)\\u0000"', r"\1", json.dumps(d)).encode()

    def comp(body, **kw):  # a completions request with a JSON body (dict or bytes)
        return req(body=body if isinstance(body, bytes) else dumps(body), **kw)

    def chat(body, **kw):
        return req(path=b"/v1/chat/completions", body=body if isinstance(body, bytes) else dumps(body), **kw)

    G = {"model": MODEL, "prompt": "ROMEO:\n", "max_tokens": 2, "temperature": 0}
    GB = json.dumps(G).encode()
    M = [{"role": "user", "content": "hello"}]
    CH = hex(len(GB))[2:].encode() + b"\r\n" + GB + b"\r\n0\r\n\r\n"  # GB as one chunk
    CL = str(len(GB)).encode()
    C400 = {400}
    C = []
    add = C.append

    def g(**kw):
        d = dict(G)
        d.update(kw)
        return d

    # -- request line (MHD parses it; what reaches us gets OpenAI's shape)
    add(Case("no version (GET /v1/models)", b"GET /v1/models\r\n\r\n", C400, close=True, mhd=True))
    add(Case("method only", b"GET\r\n\r\n", {None, 400}, close=True, mhd=True))  # MHD closes at once
    add(Case("HTTP/2.0 version", req(b"GET", b"/v1/models", version=b"HTTP/2.0"), {505}, close=True, mhd=True))
    add(Case("HTTP/3.0 version", req(b"GET", b"/v1/models", version=b"HTTP/3.0"), {505}, close=True, mhd=True))
    add(Case("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", {505}, close=True, mhd=True))
    add(Case("version FOO/1.1", req(b"GET", b"/v1/models", version=b"FOO/1.1"), {400, 505}, close=True, mhd=True))
    add(Case("lower-case version", req(b"GET", b"/v1/models", version=b"http/1.1"), {400, 505}, close=True, mhd=True))
    add(Case("TLS ClientHello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(64)), {None, 400, 408}, mhd=True))
    add(Case("1 KiB of binary", bytes((i * 37 + 11) % 256 for i in range(1024)), {None, 400, 408}, mhd=True))
    add(Case("CRLF only then close-less wait", b"\r\n\r\n\r\n", {None, 400, 408}, mhd=True))
    add(Case("100 KB path", req(b"GET", b"/" + b"a" * 100000), {414, 431, 400}, close=True, mhd=True))
    add(Case("64 KiB header value", req(b"GET", b"/v1/models", headers=b"X-Big: " + b"a" * 65536 + b"\r\n"),
             {431, 400, 413}, close=True, mhd=True))
    add(Case("4000 headers", req(b"GET", b"/v1/models", headers=b"".join(b"X-%d: v\r\n" % i for i in range(4000))),
             {431, 400, 413}, close=True, mhd=True))
    # -- methods and paths
    for m in (b"GET", b"PUT", b"DELETE", b"PATCH", b"OPTIONS", b"TRACE", b"FOO", b"get", b"post"):
        add(Case("%s /v1/completions" % m.decode(), req(m, body=GB if m in (b"PUT", b"PATCH", b"post") else None),
                 {405}))
    add(Case("POST /v1/models", req(b"POST", b"/v1/models", body=b"{}"), {405}))
    add(Case("DELETE /v1/models", req(b"DELETE", b"/v1/models"), {405}))
    add(Case("GET /v1/chat/completions", req(b"GET", b"/v1/chat/completions"), {405}))
    add(Case("POST /health", req(b"POST", b"/health", body=b"{}"), {405}))
    add(Case("POST /metrics", req(b"POST", b"/metrics", body=b"{}"), {405}))
    add(Case("CONNECT", b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n" + K + b"\r\n", {400, 404, 405}))
    add(Case("OPTIONS *", req(b"OPTIONS", b"*"), {400, 404, 405}))
    for p in (b"/", b"/v2/completions", b"/v1/completions/", b"/v1/completion", b"/V1/COMPLETIONS",
              b"/v1/../v1/completions", b"/v1/completions%00", b"/v1/%2e%2e/v1/models", b"/v1/caf\xc3\xa9",
              b"/v1/mo\x01dels", b"/v1/engines/probe/completions", b"/v1//completions"):
        add(Case("POST %r" % p, comp(G, path=p), {400, 404}))
    # -- Host (RFC 9112 3.2: a 1.1 request without Host, with two, or with an invalid one: 400)
    add(Case("HTTP/1.1 without Host", req(b"GET", b"/v1/models", host=False), C400))
    add(Case("two Host headers", req(b"GET", b"/v1/models", headers=b"Host: u\r\n"), C400))
    add(Case("Host with a space", req(b"GET", b"/v1/models", host=False, headers=b"Host: a b\r\n"), C400))
    # -- header syntax and framing (RFC 9112): 400 and the connection closed
    for name, h, body in (
            ("two different Content-Length", b"Content-Length: " + CL + b"\r\nContent-Length: 2\r\n", GB),
            ("two equal Content-Length", b"Content-Length: " + CL + b"\r\nContent-Length: " + CL + b"\r\n", GB),
            ("Transfer-Encoding and Content-Length", b"Transfer-Encoding: chunked\r\nContent-Length: " + CL + b"\r\n", CH),
            ("Content-Length then Transfer-Encoding", b"Content-Length: " + CL + b"\r\nTransfer-Encoding: chunked\r\n", CH),
            ("Transfer-Encoding gzip", b"Transfer-Encoding: gzip\r\n", GB),
            ("Transfer-Encoding chunked, gzip", b"Transfer-Encoding: chunked, gzip\r\n", CH),
            ("Transfer-Encoding identity", b"Transfer-Encoding: identity\r\n", GB),
            ("Transfer-Encoding xchunked", b"Transfer-Encoding: xchunked\r\n", CH),
            ("two Transfer-Encoding chunked", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", CH),
            ("obs-fold (space)", b"X-A: foo\r\n bar baz\r\nContent-Length: " + CL + b"\r\n", GB),
            ("obs-fold (tab)", b"X-A: foo\r\n\tbar baz\r\nContent-Length: " + CL + b"\r\n", GB),
            ("obs-fold of Content-Length", b"Content-Length: " + CL[:1] + b"\r\n " + CL[1:] + b"\r\n", GB),
            ("obs-fold of Transfer-Encoding", b"Transfer-Encoding: chun\r\n ked\r\n", CH),
            ("bare CR in a value", b"X-A: foo\rbar\r\nContent-Length: " + CL + b"\r\n", GB),
            ("control byte 0x01 in a value", b"X-A: foo\x01bar\r\nContent-Length: " + CL + b"\r\n", GB),
            ("DEL in a value", b"X-A: foo\x7fbar\r\nContent-Length: " + CL + b"\r\n", GB),
            ("ESC in a value", b"X-A: \x1b[31m\r\nContent-Length: " + CL + b"\r\n", GB),
            ("space before the colon", b"Content-Length : 2\r\nContent-Length: " + CL + b"\r\n", GB),
            ("tab before the colon", b"Content-Length\t: " + CL + b"\r\n", GB),
            ("space in a name", b"X A: b\r\nContent-Length: " + CL + b"\r\n", GB),
    ):
        add(Case(name, req(headers=h, body=body, cl=False), C400, close=True))
    # a well-framed coding the server does not decode: 501 (RFC 9112 6.1), closed all the same
    add(Case("Transfer-Encoding gzip, chunked", req(headers=b"Transfer-Encoding: gzip, chunked\r\n", body=CH, cl=False),
             {501}, close=True))
    # MHD 0.9.75 ends the header section at an empty field name after a field: the POST it sees
    # has no length (411, RFC 9110 15.5.12), and the rest is not read as a second request
    add(Case("empty name", req(headers=b": b\r\nContent-Length: 7\r\n", body=b'{"a":1}', cl=False), {411},
             close=True))
    add(Case("Transfer-Encoding in HTTP/1.0", req(headers=b"Transfer-Encoding: chunked\r\n", body=CH, cl=False,
                                                  version=b"HTTP/1.0"), C400, close=True))
    for name, h in (("header line without a colon", b"Foo\r\nContent-Length: 7\r\n"),
                    ("Content-Length 7, 7", b"Content-Length: 7, 7\r\n"), ("Content-Length +7", b"Content-Length: +7\r\n"),
                    ("Content-Length -7", b"Content-Length: -7\r\n"), ("Content-Length 0x7", b"Content-Length: 0x7\r\n"),
                    ("Content-Length empty", b"Content-Length: \r\n"), ("Content-Length 7a", b"Content-Length: 7a\r\n"),
                    ("Content-Length 7 7", b"Content-Length: 7 7\r\n")):
        add(Case(name, req(headers=h, body=b'{"a":1}', cl=False), C400, close=True, mhd=True))
    add(Case("Content-Length 10^23", req(headers=b"Content-Length: 99999999999999999999999\r\n", cl=False),
             {400, 413}, close=True, mhd=True))
    add(Case("Content-Length 100 MB", req(headers=b"Content-Length: 100000000\r\n", cl=False), {413}, close=True))
    add(Case("Content-Length 2 MiB, body sent", req(body=b"{" + b" " * (2 << 20) + b"}"), {413}, close=True))
    add(Case("chunked body over 1 MiB", req(headers=b"Transfer-Encoding: chunked\r\n", cl=False,
                                            body=b"".join([b"10000\r\n" + b" " * 65536 + b"\r\n"] * 20) + b"0\r\n\r\n"),
             {413}))  # read to its end, so the connection may stay open
    add(Case("Content-Length larger than the body", req(headers=b"Content-Length: 100\r\n", body=GB, cl=False), {408},
             close=True))
    add(Case("Content-Length smaller than the body", req(headers=b"Content-Length: 10\r\n", body=GB, cl=False), C400,
             extra_ok=True))
    add(Case("POST without a body or length", req(), {400, 411}))
    add(Case("Content-Length 0", req(body=b""), C400))
    # -- chunked bodies
    TE = b"Transfer-Encoding: chunked\r\n"
    for name, body, want, mhd in (
            ("chunk size not hex", b"zz\r\n" + GB + b"\r\n0\r\n\r\n", C400, True),
            ("chunk size negative", b"-1\r\n" + GB + b"\r\n0\r\n\r\n", C400, True),
            ("chunk size 2^72", b"ffffffffffffffffff\r\n" + GB + b"\r\n0\r\n\r\n", {400, 413}, True),
            ("chunk data longer than its size", b"4\r\n" + GB + b"\r\n0\r\n\r\n", C400, True),
            ("chunk without CRLF after data", hex(len(GB))[2:].encode() + b"\r\n" + GB + b"0\r\n\r\n", C400, True),
            ("chunk size with a space inside", b"1 0\r\n" + GB + b"\r\n0\r\n\r\n", C400, True),
            ("no last chunk", hex(len(GB))[2:].encode() + b"\r\n" + GB + b"\r\n", {408}, False),
            ("truncated chunk", b"40\r\n{\"prompt\":", {408}, False),
            ("chunked, bad JSON inside", b"3\r\n{\"a\r\n0\r\n\r\n", C400, False),
    ):
        add(Case(name, req(headers=TE, body=body, cl=False), want, close=want != C400 or mhd, mhd=mhd))
    # -- bodies that are not a JSON object
    for name, body in (
            ("empty JSON text", b" "),
            ("null", b"null"),
            ("a list", b"[]"),
            ("a number", b"1"),
            ("a string", b'"x"'),
            ("true", b"true"),
            ("unclosed object", b'{"prompt": "x",'),
            ("truncated string", b'{"prompt": "ROM'),
            ("trailing garbage", b'{"prompt": "x"} x'),
            ("two objects", b"{}{}"),
            ("single quotes", b"{'prompt': 'x'}"),
            ("NaN literal", b'{"prompt":"x","temperature":NaN}'),
            ("Infinity literal", b'{"prompt":"x","top_p":Infinity}'),
            ("trailing comma", b'{"prompt":"x",}'),
            ("comment", b'{"prompt":"x" /* c */}'),
            ("bare key", b'{prompt:"x"}'),
            ("leading zero", b'{"prompt":"x","max_tokens":02}'),
            ("negative leading zero", b'{"prompt":"x","seed":-01}'),
            ("trailing dot", b'{"prompt":"x","max_tokens":2.}'),
            ("dot before the exponent", b'{"prompt":"x","max_tokens":2.e1}'),
            ("hex number", b'{"prompt":"x","max_tokens":0x2}'),
            ("100000-deep list", b"[" * 100000 + b"]" * 100000),
            ("50000-deep object", b'{"a":' * 50000 + b"1" + b"}" * 50000),
            ("invalid UTF-8 in a string", b'{"prompt": "\xc3\x28"}'),
            ("invalid UTF-8 outside strings", b'{"prompt": "x"\xff}'),
            ("overlong UTF-8", b'{"prompt": "\xc0\xaf"}'),
            ("UTF-8 surrogate", b'{"prompt": "\xed\xa0\x80"}'),
            ("truncated UTF-8", b'{"prompt": "\xe2\x82"}'),
            ("lone surrogate escape", b'{"prompt": "a\\ud800"}'),
            ("raw NUL in a string", b'{"prompt": "a\x00b"}'),
            ("\\u0000 escape", b'{"prompt": "a\\u0000b"}'),
            ("raw control byte in a string", b'{"prompt": "a\x01b"}'),
            ("bad escape", b'{"prompt": "a\\qb"}'),
            ("duplicate key", b'{"prompt": "a", "prompt": "b"}')):
        add(Case(name, comp(body), C400))
    # -- fields: types, ranges, caps
    for name, kw in (
            ("prompt missing", {"prompt": None}), ("prompt a number", {"prompt": 5}), ("prompt true", {"prompt": True}),
            ("prompt an object", {"prompt": {}}), ("prompt empty", {"prompt": ""}), ("prompt []", {"prompt": []}),
            ("prompt [[]]", {"prompt": [[]]}), ("prompt [1.5]", {"prompt": [1.5]}), ("prompt [-1]", {"prompt": [-1]}),
            ("prompt token id past the vocabulary", {"prompt": [100000]}), ("prompt token id 2^64",
                                                                            {"prompt": [2 ** 64]}),
            ("prompt mixed list", {"prompt": ["a", 5]}), ("prompt 65 prompts (over --max-prompts 64)", {"prompt": ["a"] * 65}),
            ("prompt over the context", {"prompt": "ROMEO: " * 40}),
            ("prompt + max_tokens over the context", {"prompt": "ROMEO: " * 15, "max_tokens": 100}),
            ("prompt character outside the vocabulary", {"prompt": "caf\u00e9 \u4e2d"}),
            ("max_tokens -1", {"max_tokens": -1}), ("max_tokens 1.5", {"max_tokens": 1.5}),
            ("max_tokens a string", {"max_tokens": "5"}), ("max_tokens true", {"max_tokens": True}),
            ("max_tokens 1e300", {"max_tokens": Lit("1e300")}), ("max_tokens 2^63", {"max_tokens": 2 ** 63}),
            ("max_tokens over the cap", {"max_tokens": 129}), ("max_tokens 0 without echo", {"max_tokens": 0}),
            ("temperature -0.1", {"temperature": -0.1}), ("temperature 2.0001", {"temperature": 2.0001}),
            ("temperature a string", {"temperature": "1"}), ("temperature 1e999", {"temperature": Lit("1e999")}),
            ("temperature -1e999", {"temperature": Lit("-1e999")}), ("temperature a list", {"temperature": [1]}),
            ("top_p -1e-300", {"top_p": -1e-300}), ("top_p 1.0000001", {"top_p": 1.0000001}),
            ("top_p 1e999", {"top_p": Lit("1e999")}), ("top_p a string", {"top_p": "0.5"}),
            ("top_k -2", {"top_k": -2}), ("top_k 1.5", {"top_k": 1.5}), ("top_k a string", {"top_k": "3"}),
            ("seed 2^53", {"seed": 2 ** 53}), ("seed -2^53", {"seed": -2 ** 53}), ("seed 1.5", {"seed": 1.5}),
            ("seed a string", {"seed": "1"}), ("seed 1e300", {"seed": Lit("1e300")}),
            ("n 0", {"n": 0}), ("n -1", {"n": -1}), ("n 9", {"n": 9}), ("n 1000", {"n": 1000}), ("n 1.5", {"n": 1.5}),
            ("n a string", {"n": "2"}), ("prompts x n over the server", {"prompt": ["a"] * 16, "n": 8}),
            ("stop a number", {"stop": 5}), ("stop empty string", {"stop": ""}), ("stop [\"\"]", {"stop": [""]}),
            ("stop 5 strings", {"stop": ["a", "b", "c", "d", "e"]}), ("stop 300 bytes", {"stop": "x" * 300}),
            ("stop [1]", {"stop": [1]}), ("echo a string", {"echo": "yes"}), ("echo 1", {"echo": 1}),
            ("logprobs 6", {"logprobs": 6}), ("logprobs -1", {"logprobs": -1}), ("logprobs true", {"logprobs": True}),
            ("stream a string", {"stream": "true"}), ("stream 1", {"stream": 1}),
            ("stream_options without stream", {"stream_options": {"include_usage": True}}),
            ("stream_options.include_usage a string", {"stream": True, "stream_options": {"include_usage": "x"}}),
            ("stream_options a list", {"stream": True, "stream_options": []}),
            ("ignore_eos a string", {"ignore_eos": "x"}), ("user a number", {"user": 5}),
            ("presence_penalty 3", {"presence_penalty": 3}), ("frequency_penalty -2.5", {"frequency_penalty": -2.5}),
            ("model a number", {"model": 5}),
    ):
        d = g(**kw)
        for k in [k for k, v in kw.items() if v is None]:
            del d[k]
        add(Case(name, comp(d), C400))
    for name, kw in (("model another", {"model": "gpt-4"}), ("model empty", {"model": ""}),
                     ("model with a NUL escape", {"model": "probe\u0000"})):
        add(Case(name, comp(g(**kw)), {400, 404}))
    # -- chat
    for name, d in (
            ("chat: messages missing", {"max_tokens": 2}), ("chat: messages []", {"messages": []}),
            ("chat: messages a string", {"messages": "hi"}), ("chat: message {}", {"messages": [{}]}),
            ("chat: role bot", {"messages": [{"role": "bot", "content": "x"}]}),
            ("chat: role missing", {"messages": [{"content": "x"}]}),
            ("chat: content a number", {"messages": [{"role": "user", "content": 5}]}),
            ("chat: user content null", {"messages": [{"role": "user", "content": None}]}),
            ("chat: image part", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url":
                                                                              {"url": "http://x/y.png"}}]}]}),
            ("chat: part without text", {"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
            ("chat: name a number", {"messages": [{"role": "user", "content": "x", "name": 5}]}),
            ("chat: 257 messages", {"messages": M * 257}),
            ("chat: max_completion_tokens -1", {"messages": M, "max_completion_tokens": -1}),
            ("chat: max_tokens 0", {"messages": M, "max_tokens": 0}),
            ("chat: logprobs 5", {"messages": M, "logprobs": 5}),
            ("chat: top_logprobs 21", {"messages": M, "logprobs": True, "top_logprobs": 21}),
            ("chat: top_logprobs without logprobs", {"messages": M, "top_logprobs": 2}),
            ("chat: content over the context", {"messages": [{"role": "user", "content": "ROMEO: " * 40}]}),
    ):
        add(Case(name, chat(d), C400))
    add(Case("chat: a prompt field only", chat({"prompt": "x"}), C400))
    # -- the key
    add(Case("no key (completions)", comp(G, auth=False), {401}))
    add(Case("no key (models)", req(b"GET", b"/v1/models", auth=False), {401}))
    add(Case("no key (chat)", chat({"messages": M}, auth=False), {401}))
    for name, h in (("wrong key", b"Authorization: Bearer nope\r\n"), ("Bearer without a key", b"Authorization: Bearer\r\n"),
                    ("Basic scheme", b"Authorization: Basic cHJvYmU6a2V5\r\n"),
                    ("key without scheme", b"Authorization: " + key.encode() + b"\r\n"),
                    ("the key less its last byte", b"Authorization: Bearer " + key[:-1].encode() + b"\r\n"),
                    ("the key plus a byte", b"Authorization: Bearer " + key.encode() + b"x\r\n"),
                    ("the key in X-Api-Key", b"X-Api-Key: " + key.encode() + b"\r\n")):
        add(Case(name, comp(G, auth=False, headers=h), {401}))
    names = [c.name for c in C]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, dup
    return C


def controls(key):
    """Valid requests the harness must see answered 200 (proves the harness reads answers)."""
    K = ("Authorization: Bearer %s\r\n" % key).encode()
    B = json.dumps({"model": MODEL, "prompt": "ROMEO:\n", "max_tokens": 2, "temperature": 0,
                    "some_unknown_field": {"x": 1}, "logit_bias": {"5": 1}}).encode()
    base = b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + K
    return [
        Case("control: valid, unknown fields ignored", base + b"Content-Length: %d\r\n\r\n" % len(B) + B, {200}),
        Case("control: chunked", base + b"Transfer-Encoding: chunked\r\n\r\n" + hex(len(B))[2:].encode() + b"\r\n" +
             B + b"\r\n0\r\n\r\n", {200}),
        Case("control: Expect 100-continue", base + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(B) + B,
             {200}),
        Case("control: body in 3 pieces", [base + b"Content-Length: %d\r\n\r\n" % len(B), B[:5], B[5:]], {200}),
        Case("control: GET /health without a key", b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n", {200}),
    ]
