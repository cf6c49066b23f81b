/*
 * JSON files read as one document (reader_jsonl.c's "document" form of the
 * JSON format): a pretty-printed array, or an object holding the list of
 * records under a key, as `datasets.load_dataset("json", field=KEY)` reads
 * {"version": "1.0", "data": [{...}, {...}]}. Contract in
 * include/llmforge/data.h ("record readers"); user guide docs/readers.md.
 *
 * The whole file is read (at most LF_READER_MAX_TEXT_BYTES) and checked with
 * cJSON first, so a broken document is refused before any record is handed
 * out, with the line and column of the error. The list is then located by a
 * small scanner over the (now known valid) text, which gives each element's
 * byte span and line, so the records' messages read "FILE:LINE" as the
 * streaming readers' do. Memory: the file's text while it is read (unlike
 * the streaming forms); the cJSON tree only during the check.
 *
 * Which list: the top-level array; else the object's key `field`; else the
 * object's one key whose value is an array (logged, LF_LOG_INFO, saying which);
 * several or none is an error naming the keys.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "data_impl.h"

static int blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static size_t skip_blank(const char *s, size_t n, size_t i) {
    while (i < n && blank(s[i])) i++;
    return i;
}

/* End of the JSON value starting at s[i] (the text is valid JSON). */
static size_t skip_value(const char *s, size_t n, size_t i) {
    int depth = 0, in_str = 0, esc = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (esc) esc = 0;
            else if (c == '\\') esc = 1;
            else if (c == '"') {
                in_str = 0;
                if (depth == 0) return i + 1;
            }
        } else if (c == '"') in_str = 1;
        else if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') {
            if (depth == 0) return i; /* the end of a scalar at the container's end */
            if (--depth == 0) return i + 1;
        } else if (depth == 0 && (c == ',' || blank(c))) return i;
    }
    return n;
}

static uint64_t lines_to(const lf__json_doc *d, size_t to) {
    uint64_t l = 0;
    for (size_t i = d->line_at; i < to; i++)
        if (d->text[i] == '\n') l++;
    return l;
}

void lf__json_doc_free(lf__json_doc *d) {
    lf_free(d->text);
    memset(d, 0, sizeof *d);
}

/* Where the error near `end` is, for messages. */
static void where(const char *s, size_t n, const char *end, uint64_t *line, size_t *col) {
    size_t off = end && end >= s && end <= s + n ? (size_t)(end - s) : 0;
    *line = 1;
    *col = off + 1;
    for (size_t i = 0; i < off; i++)
        if (s[i] == '\n') {
            (*line)++;
            *col = off - i;
        }
}

lf_status lf__json_doc_open(lf__json_doc *d, const char *path, const char *field, int *not_json) {
    memset(d, 0, sizeof *d);
    *not_json = 0;
    char *text = NULL;
    size_t len = 0;
    lf_status st = lf_file_read_all(path, LF_READER_MAX_TEXT_BYTES, &text, &len);
    if (st != LF_OK) return st;
    d->text = text;
    d->len = len;
    size_t at = len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3) ? 3 : 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text + at, len - at, &end, 0);
    size_t after = root && end ? skip_blank(text, len, (size_t)(end - text)) : 0;
    if (!root || after < len) {
        uint64_t line;
        size_t col;
        where(text, len, root ? text + after : end, &line, &col);
        *not_json = 1;
        cJSON_Delete(root);
        st = lf_fail(LF_ERR_FORMAT, "%s:%llu: not valid JSON (%s near column %zu)", path, (unsigned long long)line,
                     root ? "text after the end of the document" : "error", col);
        goto fail;
    }
    int is_obj = cJSON_IsObject(root), is_arr = cJSON_IsArray(root);
    char keys[512] = "";
    int n_lists = 0;
    const char *chosen = NULL;
    if (is_obj) {
        const cJSON *v;
        cJSON_ArrayForEach(v, root) {
            if (!cJSON_IsArray(v)) continue;
            size_t k = strlen(keys);
            snprintf(keys + k, sizeof keys - k, "%s'%s'", k ? ", " : "", v->string);
            n_lists++;
            if (!chosen) chosen = v->string;
        }
    }
    if (!is_obj && !is_arr) {
        st = lf_fail(LF_ERR_FORMAT, "%s: the JSON document is %s, not a list of records nor an object holding one",
                     path, lf__json_type_name(root));
    } else if (is_obj && field) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, field);
        if (!v)
            st = lf_fail(LF_ERR_FORMAT, "%s: the JSON object has no key '%s' (--field); its lists: %s", path, field,
                         n_lists ? keys : "none");
        else if (!cJSON_IsArray(v))
            st = lf_fail(LF_ERR_FORMAT, "%s: key '%s' (--field) holds %s, not a list of records", path, field,
                         lf__json_type_name(v));
        chosen = field;
    } else if (is_obj && n_lists != 1) {
        st = lf_fail(LF_ERR_FORMAT,
                     n_lists ? "%s: the JSON object holds several lists (%s): name the one of records with --field"
                             : "%s: the JSON object holds no list of records%s",
                     path, keys);
    } else if (is_obj) {
        lf_log(LF_LOG_INFO, "%s: a JSON object: reading the records of its one list, key '%s'", path, chosen);
    } else if (field) {
        st = lf_fail(LF_ERR_FORMAT, "%s: --field '%s' names a key of an object, but the JSON document is a list", path,
                     field);
    }
    if (st != LF_OK) {
        cJSON_Delete(root);
        goto fail;
    }
    /* locate the list's '[' in the text */
    size_t i = skip_blank(text, len, at);
    if (is_obj) {
        i = skip_blank(text, len, i + 1);
        size_t found = 0;
        while (i < len && text[i] == '"' && !found) {
            size_t ke = skip_value(text, len, i);
            cJSON *k = cJSON_ParseWithLength(text + i, ke - i);
            int match = k && cJSON_IsString(k) && !strcmp(k->valuestring, chosen);
            cJSON_Delete(k);
            i = skip_blank(text, len, ke);
            i = skip_blank(text, len, i + 1); /* ':' */
            if (match) {
                found = i;
            } else {
                i = skip_blank(text, len, skip_value(text, len, i));
                i = skip_blank(text, len, i + 1); /* ',' */
            }
        }
        if (!found || text[found] != '[') {
            cJSON_Delete(root);
            st = lf_fail(LF_ERR_INTERNAL, "%s: the list under '%s' was not found in the text", path, chosen);
            goto fail;
        }
        i = found;
    }
    if (cJSON_GetArraySize(is_obj ? cJSON_GetObjectItemCaseSensitive(root, chosen) : root) == 0) {
        cJSON_Delete(root);
        st = lf_fail(LF_ERR_FORMAT, "%s: the list of records%s%s%s is empty (no records)", path, is_obj ? " '" : "",
                     is_obj ? chosen : "", is_obj ? "'" : "");
        goto fail;
    }
    cJSON_Delete(root);
    d->pos = i + 1; /* after '[' */
    d->line = 1 + lines_to(d, d->pos);
    d->line_at = d->pos;
    return LF_OK;
fail:
    lf__json_doc_free(d);
    return st;
}

lf_status lf__json_doc_next(lf__json_doc *d, const char **elem, size_t *n, uint64_t *line, int *eof) {
    *eof = 0;
    size_t i = skip_blank(d->text, d->len, d->pos);
    if (d->done || i >= d->len || d->text[i] == ']') {
        d->done = 1;
        *eof = 1;
        return LF_OK;
    }
    size_t e = skip_value(d->text, d->len, i);
    d->line += lines_to(d, i);
    d->line_at = i;
    *elem = d->text + i;
    *n = e - i;
    *line = d->line;
    i = skip_blank(d->text, d->len, e);
    if (i < d->len && d->text[i] == ',') i++;
    else d->done = 1; /* ']' */
    d->pos = i;
    return LF_OK;
}

size_t lf__json_doc_offset(const lf__json_doc *d) { return d->pos; }

/* 1 when root (one line, the whole file) reads as a document rather than
 * one JSON Lines record: an object with exactly one list-valued key whose
 * first element is an object, and none of the keys a record is read by. */
static int one_line_document(const cJSON *root, const char *record_key) {
    static const char *const keys[] = {"text",        "prompt", "response", "input_text",   "target_text",
                                       "instruction", "output", "messages", "conversations"};
    if (!cJSON_IsObject(root)) return 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (cJSON_GetObjectItemCaseSensitive(root, keys[k])) return 0;
    if (record_key && cJSON_GetObjectItemCaseSensitive(root, record_key)) return 0;
    int lists = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, root) {
        if (cJSON_IsArray(v)) lists += cJSON_IsObject(v->child) ? 1 : 2;
    }
    return lists == 1;
}

int lf__json_sniff(const char *path, size_t cap, const char *record_key) {
    FILE *f = fopen(path, "rb");
    if (!f) return LF__JSON_SNIFF_LINES; /* let the reader report it */
    char *buf = NULL;
    size_t n = 0, c = 0;
    int ch, res = LF__JSON_SNIFF_LINES, more = 0, line_done = 0;
    while ((ch = fgetc(f)) != EOF) {
        if (line_done) {
            if (!blank((char)ch)) {
                more = 1;
                break;
            }
            continue;
        }
        if (ch == '\n') {
            size_t k = 0;
            while (k < n && blank(buf[k])) k++;
            if (k < n) line_done = 1; /* the first non-blank line */
            else n = 0;
            continue;
        }
        if (n >= cap) break; /* too long to tell: as JSON Lines */
        if (n + 1 >= c) {
            size_t nc = c ? 2 * c : 4096;
            char *nb = realloc(buf, nc);
            if (!nb) break;
            buf = nb;
            c = nc;
        }
        buf[n++] = (char)ch;
    }
    fclose(f);
    if (buf && n < cap) {
        size_t at = n >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3) ? 3 : 0;
        const char *end = NULL;
        cJSON *v = cJSON_ParseWithLengthOpts(buf + at, n - at, &end, 0);
        if (!v || skip_blank(buf, n, (size_t)(end - buf)) != n) res = LF__JSON_SNIFF_NOT_JSON;
        else if (!more && one_line_document(v, record_key)) res = LF__JSON_SNIFF_DOCUMENT;
        cJSON_Delete(v);
    }
    free(buf);
    return res;
}
