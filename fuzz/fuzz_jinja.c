/*
 * Fuzz harness: the Jinja chat-template interpreter (src/data/jinja_lex.c,
 * jinja_parse.c, jinja_eval.c, jinja_value.c, jinja_builtins.c) and the
 * assistant-turn rule of src/data/chat_jinja.c.
 *
 * Input: a selector byte, the template source, then optionally a NUL and a
 * messages JSON list (none or not a list: a fixed three-message
 * conversation). Selector bit 0: add_generation_prompt; bit 1: also find
 * the assistant turns (renders every prefix three times).
 *
 * Renders run under small bounds (200000 steps, 64 KiB of output, 16 MiB
 * of values) so a hostile template ends fast: exceeding one is
 * LF_ERR_RANGE, never a hang or a crash.
 *
 * Invariants: compile either fails with a message (LF_ERR_FORMAT,
 * LF_ERR_UNSUPPORTED, LF_ERR_RANGE, LF_ERR_NOMEM) and no handle, or gives
 * one; a render either fails with a message or gives a NUL-terminated text
 * of at most the output bound whose spans cover it in order, none empty,
 * neighbours of different kinds; the turns lie inside the rendering, in
 * order, without overlap.
 */
#include <cjson/cJSON.h>

#include "fuzz_util.h"
#include "data/chat_template.h"
#include "data/jinja.h"

static const char k_default_messages[] =
    "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \" hi <|im_end|> \"},"
    " {\"role\": \"assistant\", \"content\": \"yo\"}]";

static lf_status render_prefix(const void *ctx, const cJSON *messages, int k, int add_gen, char **out, size_t *len) {
    const lf__jinja *t = ctx;
    cJSON *vars = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    int i = 0;
    for (const cJSON *m = messages->child; m && i < k; m = m->next, i++) cJSON_AddItemReferenceToArray(arr, (cJSON *)m);
    cJSON_AddItemToObject(vars, "messages", arr);
    cJSON_AddBoolToObject(vars, "add_generation_prompt", add_gen);
    cJSON_AddStringToObject(vars, "bos_token", "<s>");
    cJSON_AddStringToObject(vars, "eos_token", "</s>");
    lf__jinja_limits lim = {1 << 16, 16u << 20, 200000};
    lf_status st = lf__jinja_render(t, vars, "2026-12-07 12:00:00", &lim, out, len, NULL, NULL);
    cJSON_Delete(vars);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int sel = data[0];
    const char *src = (const char *)data + 1;
    size_t n = size - 1;
    const char *nul = memchr(src, 0, n);
    size_t src_len = nul ? (size_t)(nul - src) : n;
    cJSON *msgs = nul ? cJSON_ParseWithLength(nul + 1, n - src_len - 1) : NULL;
    if (!cJSON_IsArray(msgs)) {
        cJSON_Delete(msgs);
        msgs = cJSON_Parse(k_default_messages);
    }
    lf__jinja *t = NULL;
    lf_status st = lf__jinja_compile(src, src_len, "fuzz.jinja", &t);
    fuzz_note("compile", st);
    if (st != LF_OK) {
        FUZZ_CHECK(t == NULL);
        FUZZ_CHECK(lf_last_error()[0] != 0);
        cJSON_Delete(msgs);
        return 0;
    }
    FUZZ_CHECK(t != NULL);
    cJSON *vars = cJSON_CreateObject();
    cJSON_AddItemReferenceToObject(vars, "messages", msgs);
    cJSON_AddBoolToObject(vars, "add_generation_prompt", sel & 1);
    cJSON_AddStringToObject(vars, "bos_token", "<s>");
    cJSON_AddStringToObject(vars, "eos_token", "</s>");
    cJSON_AddNullToObject(vars, "tools");
    lf__jinja_limits lim = {1 << 16, 16u << 20, 200000};
    char *out = NULL;
    size_t len = 0;
    lf__chat_span *sp = NULL;
    int n_sp = 0;
    st = lf__jinja_render(t, vars, "2026-12-07 12:00:00", &lim, &out, &len, &sp, &n_sp);
    fuzz_note("render", st);
    if (st != LF_OK) {
        FUZZ_CHECK(out == NULL);
        FUZZ_CHECK(lf_last_error()[0] != 0);
    } else {
        FUZZ_CHECK(out != NULL && out[len] == 0 && len <= lim.max_output);
        size_t off = 0;
        for (int i = 0; i < n_sp; i++) {
            FUZZ_CHECK(sp[i].off == off && sp[i].len > 0);
            FUZZ_CHECK(i == 0 || sp[i].from_template != sp[i - 1].from_template);
            off += sp[i].len;
        }
        FUZZ_CHECK(off == len);
        if (sel & 2) {
            char *full = NULL;
            size_t fl = 0, *turns = NULL;
            int nt = 0;
            if (render_prefix(t, msgs, cJSON_GetArraySize(msgs), 0, &full, &fl) == LF_OK &&
                lf__chat_turns_by_prefix(render_prefix, t, "fuzz.jinja", msgs, full, fl, &turns, &nt) == LF_OK) {
                size_t end = 0;
                for (int i = 0; i < nt; i++) {
                    FUZZ_CHECK(turns[2 * i] >= end && turns[2 * i] + turns[2 * i + 1] <= fl);
                    end = turns[2 * i] + turns[2 * i + 1];
                }
            }
            free(full);
            free(turns);
        }
    }
    free(out);
    free(sp);
    cJSON_Delete(vars);
    cJSON_Delete(msgs);
    lf__jinja_free(t);
    return 0;
}
