#!/usr/bin/env python3
"""Write the hand-made seeds of fuzz/corpus/http/ (stdlib only).

Deterministic; run from anywhere: python3 fuzz/make_seeds_http.py. The input
format is fuzz/fuzz_http.c's: the raw bytes a client sends. The seeds are the
RFC 9112 framing cases of tests/http/test_http_conform.c (duplicate and
conflicting Content-Length, Transfer-Encoding with Content-Length or other
than chunked: 400 when chunked is not the final coding, 501 for a well-formed
list with a coding the server does not decode; obsolete line folding, bare
CR / LF and control bytes, whitespace before the colon) and their
well-formed neighbours, one request each, plus a few pipelined pairs. The files are seed_*; inputs merged from fuzzing runs are
not touched.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "http")
B = b'{"a":1}'
CHUNKED = b"7\r\n" + B + b"\r\n0\r\n\r\n"


def req(headers, body=B, line=b"POST /v1/completions HTTP/1.1"):
    return line + b"\r\nHost: t\r\n" + headers + b"\r\n" + body


CASES = {
    "valid": req(b"Content-Length: 7\r\n"),
    "get": b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n",
    "http10": req(b"Content-Length: 7\r\n", line=b"POST /x HTTP/1.0"),
    "chunked": req(b"Transfer-Encoding: chunked\r\n", CHUNKED),
    "chunked_upper": req(b"Transfer-Encoding: CHUNKED\r\n", CHUNKED),
    "cl_dup_diff": req(b"Content-Length: 7\r\nContent-Length: 2\r\n"),
    "cl_dup_same": req(b"Content-Length: 7\r\nContent-Length: 7\r\n"),
    "cl_list": req(b"Content-Length: 7, 7\r\n"),
    "cl_plus": req(b"Content-Length: +7\r\n"),
    "cl_minus": req(b"Content-Length: -7\r\n"),
    "cl_hex": req(b"Content-Length: 0x7\r\n"),
    "cl_empty": req(b"Content-Length: \r\n"),
    "cl_huge": req(b"Content-Length: 99999999999999999999999\r\n"),
    "te_cl": req(b"Transfer-Encoding: chunked\r\nContent-Length: 7\r\n", CHUNKED),
    "cl_te": req(b"Content-Length: 7\r\nTransfer-Encoding: chunked\r\n", CHUNKED),
    "te_gzip": req(b"Transfer-Encoding: gzip\r\n"),
    "te_gzip_chunked": req(b"Transfer-Encoding: gzip, chunked\r\n", CHUNKED),
    "te_chunked_gzip": req(b"Transfer-Encoding: chunked, gzip\r\n", CHUNKED),
    "te_params_chunked": req(b'Transfer-Encoding: x-custom;a=b;c="d, e", chunked\r\n', CHUNKED),
    "te_empty_elements": req(b"Transfer-Encoding: , chunked\r\n", CHUNKED),
    "te_chunked_twice": req(b"Transfer-Encoding: chunked, chunked\r\n", CHUNKED),
    "te_chunked_param": req(b"Transfer-Encoding: chunked;x=1\r\n", CHUNKED),
    "te_dup": req(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", CHUNKED),
    "te_http10": req(b"Transfer-Encoding: chunked\r\n", CHUNKED, line=b"POST /x HTTP/1.0"),
    "obs_fold": req(b"X-A: foo\r\n bar baz\r\nContent-Length: 7\r\n"),
    "obs_fold_token": req(b"X-A: foo\r\n bar\r\nContent-Length: 7\r\n"),
    "obs_fold_cl": req(b"Content-Length: 1\r\n 0\r\nX: y\r\n", B + b"abc"),
    "obs_fold_te": req(b"Transfer-Encoding: chunked\r\n x\r\nContent-Length: 7\r\n"),
    "obs_fold_hides": req(b"X-A: foo\r\n\tContent-Length: 2\r\nContent-Length: 7\r\n"),
    "bare_cr": req(b"X-A: foo\rbar\r\nContent-Length: 7\r\n"),
    "bare_lf_value": req(b"X-A: foo\nContent-Length: 2\r\nContent-Length: 7\r\n"),
    "bare_lf_lines": b"POST /x HTTP/1.1\nHost: t\nContent-Length: 7\n\n" + B,
    "nul_value": req(b"X-A: foo\x00bar\r\nContent-Length: 7\r\n"),
    "ctl_value": req(b"X-A: foo\x01bar\r\nContent-Length: 7\r\n"),
    "del_value": req(b"X-A: foo\x7f\r\nContent-Length: 7\r\n"),
    "obs_text_value": req(b"X-A: caf\xc3\xa9\r\nContent-Length: 7\r\n"),
    "space_before_colon": req(b"Content-Length : 2\r\nContent-Length: 7\r\n"),
    "tab_before_colon": req(b"Content-Length\t: 7\r\n"),
    "space_in_name": req(b"X A: b\r\nContent-Length: 7\r\n"),
    "empty_name": req(b": b\r\nContent-Length: 7\r\n"),
    "no_colon": req(b"Garbage\r\nContent-Length: 7\r\n"),
    "pipelined": req(b"Content-Length: 7\r\n") + req(b"Content-Length: 7\r\n"),
    "pipelined_smuggle": req(b"Content-Length: 7\r\nContent-Length: 0\r\n") + b"GET /admin HTTP/1.1\r\nHost: t\r\n\r\n",
    "chunk_ext": req(b"Transfer-Encoding: chunked\r\n", b"7;x=y\r\n" + B + b"\r\n0\r\n\r\n"),
    "chunk_bad_size": req(b"Transfer-Encoding: chunked\r\n", b"zz\r\n" + B + b"\r\n0\r\n\r\n"),
    "short_body": req(b"Content-Length: 70\r\n"),
}

os.makedirs(OUT, exist_ok=True)
for name, raw in CASES.items():
    with open(os.path.join(OUT, "seed_" + name), "wb") as f:
        f.write(raw)
