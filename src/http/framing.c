/*
 * Request framing checks of the HTTP layer (lf__http_check_framing in
 * http_impl.h): what libmicrohttpd 0.9.75 lets through that RFC 9112 says a
 * server must refuse, checked on the header fields MHD parsed, before any
 * handler runs. A refused request gets 400 (or 501 for a transfer coding
 * the server does not decode) and its connection is closed (server.c), so
 * no byte of it is ever read as the start of another request.
 *
 * Why: two parties that frame one byte stream differently (a proxy in front,
 * this server behind) see different requests in it: request smuggling. MHD
 * takes the FIRST of two Content-Length fields, lets Transfer-Encoding win
 * over Content-Length silently, waits for the connection to close on an
 * unknown transfer coding, and keeps control bytes in field values.
 *
 * Rules (RFC 9112 §6.1-6.3, RFC 9110 §5.1, §5.5, §8.6):
 *   - a field name is a token (tchar only): this refuses a name with
 *     whitespace before the colon ("Content-Length : 5"; MHD keeps the
 *     space in the name) and the traces of obsolete line folding MHD leaves
 *     (it appends a folded line to the previous field's NAME: "X: a\r\n b: c"
 *     becomes the name "Xb: c");
 *   - a name that starts with "Content-Length" or "Transfer-Encoding" and
 *     is longer is refused too: it is what a folded framing field becomes
 *     in MHD ("Content-Length: 1\r\n 0" -> name "Content-Length0", value
 *     "1"; MHD then sees no Content-Length at all);
 *   - a field value holds no control byte but HTAB (a bare CR, DEL, ...);
 *   - at most one Content-Length field, and its value is 1*DIGIT (no sign,
 *     no list: "5, 5" is refused; a duplicate even with the same value is
 *     refused, the choice RFC 9110 §8.6 allows and the simplest to reason
 *     about);
 *   - at most one Transfer-Encoding field, only in HTTP/1.1, never with a
 *     Content-Length (RFC 9112 §6.1, §6.3 rule 3: 400);
 *   - its value a list of transfer codings (RFC 9112 §7; empty elements
 *     skipped, RFC 9110 §5.6.1) whose final coding is "chunked" (§6.3 rule
 *     4: the body length cannot be determined otherwise, so 400), with
 *     "chunked" only once (§7.1: a sender must not apply it twice; 400);
 *   - a valid list that is anything but exactly "chunked" (another coding
 *     before it, "gzip, chunked"; a parameter; or list syntax around it,
 *     ", chunked") is well framed but asks for what this server does not
 *     do: 501 (§6.1: a server that receives a transfer coding it does not
 *     understand ought to answer 501), and the connection is closed all the
 *     same. MHD decodes a body as chunked only when the whole value is
 *     "chunked" (case-insensitive), so nothing else may pass;
 *   - a POST, PUT or PATCH with neither Content-Length nor
 *     Transfer-Encoding is a 411 (RFC 9110 §15.5.12: its content length is
 *     not defined; every client sends "Content-Length: 0" for an empty
 *     body). This also catches what MHD 0.9.75 does with a line of an empty
 *     field name after another field (": b"): it ends the header section
 *     there, so the Content-Length after it, and the body, would be read as
 *     a second request;
 *   - Host (RFC 9112 §3.2): an HTTP/1.1 request without one, any request
 *     with two, or a value that is not uri-host [":" port] (RFC 3986: a
 *     reg-name, an IPv4 address or a bracketed IP literal; empty is
 *     allowed) is a 400: a proxy and this server must agree on the target.
 *
 * lf__http_unescape is MHD's URI unescaper (MHD_OPTION_UNESCAPE_CALLBACK):
 * %XX decoded as MHD does, except %00, which stays as the three characters
 * "%00": a decoded NUL would end the path as a C string, so that
 * "/v1/models%00junk" reached the "/v1/models" handler.
 *
 * What cannot be checked here, because MHD 0.9.75 removes it before any
 * callback (connection.c, get_next_header_line / process_broken_line): a
 * bare LF ends a line (RFC 9112 §2.2 allows a recipient to do so), and a
 * NUL byte ends a value (the rest of that line is dropped). docs/serving.md
 * ("HTTP framing") says what this means behind a proxy.
 *
 * A pure function of its arguments: the fuzz harness fuzz/fuzz_http.c calls
 * it directly as well as through a live server.
 */
#include "http/http_impl.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int starts_with_ci(const char *s, const char *prefix) { return strncasecmp(s, prefix, strlen(prefix)) == 0; }

static void skip_ows(const char **p) {
    while (**p == ' ' || **p == '\t') (*p)++;
}

/* A token at *p (advanced past it); its length. */
static size_t skip_token(const char **p) {
    const char *s = *p;
    while (is_tchar((unsigned char)**p)) (*p)++;
    return (size_t)(*p - s);
}

/* A quoted-string at *p (RFC 9110 §5.6.4; advanced past it): 1, or 0 when
 * it does not close. The caller refused control bytes already. */
static int skip_quoted(const char **p) {
    if (**p != '"') return 0;
    for (const char *q = *p + 1; *q; q++) {
        if (*q == '\\') {
            if (!q[1]) return 0;
            q++;
        } else if (*q == '"') {
            *p = q + 1;
            return 1;
        }
    }
    return 0;
}

/* The Transfer-Encoding value (RFC 9112 §6.1, §7): 0 for exactly "chunked",
 * else 400 (not a list of codings ending in one "chunked") or 501 (a valid
 * list this server does not decode), with why[0, cap). */
static int check_transfer_coding(const char *te, char *why, size_t cap) {
    if (strcasecmp(te, "chunked") == 0) return 0;
    int n = 0, n_chunked = 0, last_chunked = 0;
    const char *p = te;
    for (;;) {
        skip_ows(&p);
        if (*p == ',') { /* an empty list element */
            p++;
            continue;
        }
        if (!*p) break;
        const char *name = p;
        const size_t len = skip_token(&p);
        int ok = len > 0;
        for (skip_ows(&p); ok && *p == ';'; skip_ows(&p)) { /* transfer-parameter: token "=" (token / quoted) */
            p++;
            skip_ows(&p);
            ok = skip_token(&p) > 0;
            skip_ows(&p);
            ok = ok && *p == '=';
            if (ok) p++;
            skip_ows(&p);
            ok = ok && (*p == '"' ? skip_quoted(&p) : skip_token(&p) > 0);
        }
        if (!ok || (*p && *p != ',')) {
            snprintf(why, cap, "Transfer-Encoding '%.40s' is not a list of transfer codings", te);
            return 400;
        }
        const int is_chunked = len == 7 && strncasecmp(name, "chunked", 7) == 0;
        n++;
        n_chunked += is_chunked;
        last_chunked = is_chunked;
    }
    if (n == 0) {
        snprintf(why, cap, "Transfer-Encoding '%.40s' names no transfer coding", te);
        return 400;
    }
    if (!last_chunked) {
        snprintf(why, cap, "Transfer-Encoding '%.40s' does not end in 'chunked': the body length is unknown", te);
        return 400;
    }
    if (n_chunked > 1) {
        snprintf(why, cap, "Transfer-Encoding '%.40s' applies 'chunked' more than once", te);
        return 400;
    }
    snprintf(why, cap, "Transfer-Encoding '%.40s' is not implemented: only a body sent with 'chunked' alone is decoded",
             te);
    return 501;
}

/* uri-host [ ":" port ] (RFC 3986 §3.2.2-3.2.3), or empty. */
static int valid_host(const char *v) {
    const char *p = v;
    if (*p == '[') { /* IP-literal: hex digits, ':' and '.' of an IPv6 address, or IPvFuture's unreserved */
        for (p++; *p && *p != ']'; p++)
            if (!is_tchar((unsigned char)*p) && *p != ':') return 0;
        if (*p != ']' || p == v + 1) return 0;
        p++;
    } else { /* reg-name (IPv4 included): unreserved / pct-encoded / sub-delims */
        for (; *p && *p != ':'; p++) {
            const unsigned char c = (unsigned char)*p;
            if (c == '%') {
                if (!isxdigit((unsigned char)p[1]) || !isxdigit((unsigned char)p[2])) return 0;
                p += 2;
            } else if (!isalnum(c) && !strchr("-._~!$&'()*+,;=", c)) {
                return 0;
            }
        }
    }
    if (*p == ':') p++, p += strspn(p, "0123456789");
    return *p == '\0';
}

int lf__http_check_framing(const char *method, const lf__http_header *h, int n, int http10, char *why, size_t cap) {
    int n_cl = 0, n_te = 0, n_host = 0;
    const char *te = NULL;
    if (cap) why[0] = '\0';
    for (int i = 0; i < n; i++) {
        const char *name = h[i].name ? h[i].name : "";
        const char *value = h[i].value ? h[i].value : "";
        if (!name[0]) {
            snprintf(why, cap, "a header field with an empty name");
            return 400;
        }
        for (const unsigned char *p = (const unsigned char *)name; *p; p++)
            if (!is_tchar(*p)) {
                snprintf(why, cap,
                         "header field name with byte 0x%02x (whitespace before the colon, obsolete "
                         "line folding, or not a token)",
                         *p);
                return 400;
            }
        for (const unsigned char *p = (const unsigned char *)value; *p; p++)
            if ((*p < 0x20 && *p != '\t') || *p == 0x7f) {
                snprintf(why, cap, "header field '%.64s' holds the control byte 0x%02x", name, *p);
                return 400;
            }
        const int is_cl = strcasecmp(name, "Content-Length") == 0;
        const int is_te = strcasecmp(name, "Transfer-Encoding") == 0;
        if (!is_cl && !is_te && (starts_with_ci(name, "Content-Length") || starts_with_ci(name, "Transfer-Encoding"))) {
            snprintf(why, cap, "header field name '%.64s' (a folded Content-Length or Transfer-Encoding)", name);
            return 400;
        }
        if (is_cl) {
            if (++n_cl > 1) {
                snprintf(why, cap, "more than one Content-Length");
                return 400;
            }
            if (!value[0] || strspn(value, "0123456789") != strlen(value)) {
                snprintf(why, cap, "Content-Length '%.32s' is not a decimal number", value);
                return 400;
            }
        }
        if (strcasecmp(name, "Host") == 0) {
            if (++n_host > 1) {
                snprintf(why, cap, "more than one Host");
                return 400;
            }
            if (!valid_host(value)) {
                snprintf(why, cap, "Host '%.64s' is not a host[:port]", value);
                return 400;
            }
        }
        if (is_te) {
            if (++n_te > 1) {
                snprintf(why, cap, "more than one Transfer-Encoding");
                return 400;
            }
            te = value;
        }
    }
    if (n_te) {
        if (http10) {
            snprintf(why, cap, "Transfer-Encoding in an HTTP/1.0 request");
            return 400;
        }
        if (n_cl) {
            snprintf(why, cap, "both Transfer-Encoding and Content-Length");
            return 400;
        }
        const int te_status = check_transfer_coding(te, why, cap);
        if (te_status) return te_status;
    }
    if (!n_host && !http10) {
        snprintf(why, cap, "an HTTP/1.1 request without Host");
        return 400;
    }
    if (!n_cl && !n_te && method && (!strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "PATCH"))) {
        snprintf(why, cap, "a %s request without Content-Length or Transfer-Encoding", method);
        return 411;
    }
    return 0;
}

size_t lf__http_unescape(char *s) {
    char *w = s;
    for (const char *r = s; *r;) {
        int hi, lo;
        if (r[0] == '%' && (hi = hexval(r[1])) >= 0 && (lo = hexval(r[2])) >= 0 && (hi | lo)) {
            *w++ = (char)(hi * 16 + lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}
