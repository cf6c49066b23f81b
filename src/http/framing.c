/*
 * Request framing checks of the HTTP layer (lf__http_check_framing in
 * http_impl.h): what libmicrohttpd 0.9.75 lets through that RFC 9112 says a
 * server must refuse, checked on the header fields MHD parsed, before any
 * handler runs. A refused request gets 400 and its connection is closed
 * (server.c), so no byte of it is ever read as the start of another request.
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
 *     Content-Length, and its value exactly "chunked" (case-insensitive):
 *     this server decodes no other coding, and "chunked" must be the last.
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

#include <stdio.h>
#include <string.h>
#include <strings.h>

static int is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int starts_with_ci(const char *s, const char *prefix) { return strncasecmp(s, prefix, strlen(prefix)) == 0; }

int lf__http_check_framing(const lf__http_header *h, int n, int http10, char *why, size_t cap) {
    int n_cl = 0, n_te = 0;
    const char *te = NULL;
    if (cap) why[0] = '\0';
    for (int i = 0; i < n; i++) {
        const char *name = h[i].name ? h[i].name : "";
        const char *value = h[i].value ? h[i].value : "";
        if (!name[0]) {
            snprintf(why, cap, "a header field with an empty name");
            return -1;
        }
        for (const unsigned char *p = (const unsigned char *)name; *p; p++)
            if (!is_tchar(*p)) {
                snprintf(why, cap,
                         "header field name with byte 0x%02x (whitespace before the colon, obsolete "
                         "line folding, or not a token)",
                         *p);
                return -1;
            }
        for (const unsigned char *p = (const unsigned char *)value; *p; p++)
            if ((*p < 0x20 && *p != '\t') || *p == 0x7f) {
                snprintf(why, cap, "header field '%.64s' holds the control byte 0x%02x", name, *p);
                return -1;
            }
        const int is_cl = strcasecmp(name, "Content-Length") == 0;
        const int is_te = strcasecmp(name, "Transfer-Encoding") == 0;
        if (!is_cl && !is_te && (starts_with_ci(name, "Content-Length") || starts_with_ci(name, "Transfer-Encoding"))) {
            snprintf(why, cap, "header field name '%.64s' (a folded Content-Length or Transfer-Encoding)", name);
            return -1;
        }
        if (is_cl) {
            if (++n_cl > 1) {
                snprintf(why, cap, "more than one Content-Length");
                return -1;
            }
            if (!value[0] || strspn(value, "0123456789") != strlen(value)) {
                snprintf(why, cap, "Content-Length '%.32s' is not a decimal number", value);
                return -1;
            }
        }
        if (is_te) {
            if (++n_te > 1) {
                snprintf(why, cap, "more than one Transfer-Encoding");
                return -1;
            }
            te = value;
        }
    }
    if (n_te) {
        if (http10) {
            snprintf(why, cap, "Transfer-Encoding in an HTTP/1.0 request");
            return -1;
        }
        if (n_cl) {
            snprintf(why, cap, "both Transfer-Encoding and Content-Length");
            return -1;
        }
        if (strcasecmp(te, "chunked") != 0) {
            snprintf(why, cap, "Transfer-Encoding '%.32s' (only 'chunked' is accepted)", te);
            return -1;
        }
    }
    return 0;
}
