/*
 * JSON numbers that read back as the double written.
 *
 * lf_json_number tries %.1g, %.2g, ... %.17g and keeps the first that strtod
 * turns back into exactly v. %.Ng prints the N-digit decimal nearest v, so if
 * any N-digit string reads back as v that one does: the first hit is the
 * shortest. 17 digits always read back (IEEE 754 binary64). Integers below
 * 2^53 are written whole instead. glibc's printf and strtod round correctly,
 * which this relies on.
 *
 * lf_json_find_nul_escape finds the escape that cJSON would turn into a NUL
 * cutting a string short: readers of raw JSON text refuse it before parsing.
 *
 * lf_json_print prints a duplicate of the tree whose number nodes have been
 * turned into raw nodes holding that text, so cJSON's own number printer
 * (%1.15g, accepted when it reads back within a relative DBL_EPSILON) never
 * runs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "llmforge/core.h"

int lf_json_number(char *buf, size_t cap, double v) {
    if (!isfinite(v)) return snprintf(buf, cap, "null");
    /* integers (counts, sizes) as integers, as cJSON writes them: "1000000",
     * not "1e+06", which many readers would take for a float */
    if (v == floor(v) && fabs(v) < 9007199254740992.0) return snprintf(buf, cap, "%.0f", v);
    int n = 0;
    for (int prec = 1; prec <= 17; prec++) {
        n = snprintf(buf, cap, "%.*g", prec, v);
        if (n < 0 || (size_t)n >= cap || strtod(buf, NULL) == v) break;
    }
    return n;
}

/* Number nodes of the (owned) tree t become raw nodes with their exact text. */
static int exact_numbers(cJSON *t) {
    for (cJSON *it = t; it; it = it->next) {
        if (it->child && !exact_numbers(it->child)) return 0;
        if (!cJSON_IsNumber(it)) continue;
        char buf[LF_JSON_NUMBER_MAX];
        int n = lf_json_number(buf, sizeof buf, it->valuedouble);
        char *raw = cJSON_malloc((size_t)n + 1);
        if (!raw) return 0;
        memcpy(raw, buf, (size_t)n + 1);
        /* keep the flag that says who owns the key string */
        it->type = cJSON_Raw | (it->type & cJSON_StringIsConst);
        it->valuestring = raw; /* freed by cJSON_Delete, as a raw node's text is */
    }
    return 1;
}

char *lf_json_print(const struct cJSON *item, int formatted) {
    if (!item) return NULL;
    cJSON *dup = cJSON_Duplicate(item, 1);
    if (!dup) return NULL;
    char *s = NULL;
    /* the root alone, not its siblings: cJSON_Duplicate leaves next NULL */
    if (exact_numbers(dup)) s = formatted ? cJSON_Print(dup) : cJSON_PrintUnformatted(dup);
    cJSON_Delete(dup);
    return s;
}

size_t lf_json_find_nul_escape(const char *s, size_t len) {
    for (size_t i = 0; i + 5 < len; i++) {
        if (s[i] != '\\') continue;
        if (memcmp(s + i + 1, "u0000", 5) == 0) return i;
        i++; /* the escaped character */
    }
    return len;
}
