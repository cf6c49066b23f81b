/*
 * Preparation from records (lf_prepare): inputs -> readers -> tokenizer ->
 * content-hash split -> token shards + dataset.json. Contract in
 * include/llmforge/data.h ("preparation from records"), user guide in
 * docs/data.md.
 *
 * Pipeline (pass 2; "char" first builds its vocabulary in pass 1):
 *
 *   calling thread: read records in order into batch k+1 ... help encode k,
 *                   wait for k, write k in order, hand k+1 to the pool
 *   pool (n_threads - 1 POSIX threads): encode the records of batch k
 *
 * Two batches alternate: while the pool encodes one, the calling thread
 * fills the other. A batch holds copies of its records' strings (an arena
 * of offsets), the messages of records the reader skipped (in their place,
 * so skips are reported in input order), and per record the encoding
 * thread's result: the ids, the mask, the split, or the message of a bad
 * record. Records are claimed from an atomic counter; a record of
 * LF_PREPARE_LARGE_RECORD_BYTES or more is left to the calling thread, which
 * encodes it with lf_tokenizer_encode_parallel on all threads once the pool
 * is idle. The batch is then committed by the calling thread alone, in input
 * order, so shards, counts, skip messages and the first error are those of
 * a run on one thread (n_threads = 1 runs the same code without a pool).
 * The encoding itself and the pool live in prepare_encode.c
 * (prepare_impl.h holds the state they share).
 * The SHA-256 of each source (dataset.json) is one more read of the input:
 * with a pool a thread of its own computes it meanwhile, else it follows.
 *
 * Invariants:
 *  - Memory: two batches (LF_PREPARE_BATCH_BYTES of text per thread, capped
 *    at MAX_BATCH_BYTES; a batch takes at least one record, whatever its
 *    size) with their ids, one streaming shard writer per split
 *    (lf_split_writer: fixed buffers), the readers' buffers and the
 *    tokenizer. Never the input nor a whole shard.
 *  - Fine-tuning layout per record: ids(prompt) with mask 0, then
 *    ids(response) and the end-of-text id with mask 1. With a chat template
 *    (opts->chat_template) the prompt is the template's rendering of the
 *    conversation [user: prompt] with its generation prompt and the
 *    response is followed by suffix[assistant], each span tokenized as the
 *    server tokenizes it (special tokens only in template text), so the
 *    prompt ids are exactly what the chat endpoint feeds the model; the
 *    template's strings join a "char" vocabulary's first pass, and it is
 *    written to out_dir/chat_template.json. The batch sampler
 *    turns a target whose mask is 0 into -1, so the loss covers exactly the
 *    response and its end-of-text. A record's tokens may continue in the
 *    next shard of its split; the sampler reads a split as the concatenation
 *    of its shards, so nothing is lost at the cut.
 *  - Preference layout per record (mode dpo; opts->mode LF_RECORD_DPO): two
 *    fine-tuning rows, ids(prompt) ids(chosen) eot, then ids(prompt)
 *    ids(rejected) eot, the mask as above on each (join_dpo, prepare_encode.c); with a chat
 *    template each response is rendered as the chosen one is. The prompt may
 *    not be empty: lf_pairs (pairs.c) finds a row where the mask goes from
 *    1 to 0. The split key is prompt 0x00 chosen 0x00 rejected.
 *  - The split of a record is a function of its content alone (split.c).
 *  - Output order: a dataset.json already in out_dir is removed (with the
 *    chat_template.json of that run) before the
 *    first file of this run is written there (vocab.json or a shard), the
 *    shards are written as records arrive, and dataset.json comes last; each
 *    file is written to a temporary name, fsynced and renamed. On failure
 *    the shards this run finished are removed and no dataset.json is
 *    written, so a dataset.json on disk always describes complete files of
 *    one run. Shards left by an earlier run and not overwritten stay;
 *    dataset.json names the current ones.
 *  - "char" builds its vocabulary in a first pass over the inputs (the same
 *    readers with the same options, so the same records are skipped), then
 *    encodes in a second. Skipped records are reported from the second pass
 *    only.
 *  - Nothing here prints; skipped records go to opts->on_skip and progress
 *    to opts->progress, both on the calling thread.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "chat_template.h"
#include "data_impl.h"
#include "prepare_impl.h"

#define N_CODE_POINTS 0x110000u
#define VOCAB_FILE_MAX_BYTES ((size_t)64 << 20)
#define MAX_BATCH_BYTES ((size_t)64 << 20)
#define PROGRESS_EVERY ((uint64_t)1 << 20) /* pass 1: report every MiB read */

static const char *const g_split_names[LF_PREPARE_N_SPLITS] = {"train", "val", "test"};

/* ---------------------------------------------------------------- end of text (transitional)
 * lf_tokenizer_eot belongs in tokenizer.c, dispatching to the optional
 * ops->eot slot (char: tokenizer_char.c). Until that wrapper lands this weak
 * definition answers through the public API: <|endoftext|> for the kinds that
 * have special tokens, else the id of "\n" (the char kind). A strong
 * definition in tokenizer.c replaces it at link time. */
#if defined(__GNUC__)
__attribute__((weak))
#endif
int lf_tokenizer_eot(const lf_tokenizer *t) {
    if (!t) return -1;
    char saved[1024]; /* the probes below may record messages; this records none */
    snprintf(saved, sizeof saved, "%s", lf_last_error());
    uint32_t id = 0;
    int eot = -1;
    if (lf_tokenizer_special_id(t, "<|endoftext|>", &id) == LF_OK) {
        eot = id <= INT_MAX ? (int)id : -1;
    } else {
        uint32_t *ids = NULL;
        size_t n = 0;
        if (lf_tokenizer_encode(t, "\n", 1, &ids, &n) == LF_OK && n == 1 && ids[0] <= INT_MAX) eot = (int)ids[0];
        lf_free(ids);
    }
    lf_fail(LF_OK, "%s", saved);
    return eot;
}

/* ---------------------------------------------------------------- state */

lf_prepare_opts lf_prepare_opts_default(void) {
    lf_prepare_opts o;
    memset(&o, 0, sizeof o);
    o.format = LF_INPUT_AUTO;
    o.mode = LF_RECORD_PRETRAIN;
    o.split[0] = 0.9;
    o.split[1] = 0.1;
    o.split[2] = 0.0;
    return o;
}

/* ---------------------------------------------------------------- inputs */

static lf_status add_source(prep *p, const char *path, uint64_t bytes) {
    if (p->n_src == p->cap_src) {
        size_t cap = p->cap_src ? 2 * p->cap_src : 16;
        source *ns = realloc(p->src, cap * sizeof *ns);
        if (!ns) return lf_fail(LF_ERR_NOMEM, "out of memory listing inputs");
        p->src = ns;
        p->cap_src = cap;
    }
    source *s = &p->src[p->n_src];
    memset(s, 0, sizeof *s);
    if (!(s->path = malloc(strlen(path) + 1))) return lf_fail(LF_ERR_NOMEM, "out of memory listing inputs");
    strcpy(s->path, path);
    s->bytes = bytes;
    s->split = LF__SPLIT_NONE;
    p->n_src++;
    p->bytes_total += bytes;
    return LF_OK;
}

static lf_status set_source_split(source *s, int split, const char *name) {
    s->split = split;
    if (name && !(s->split_name = strdup(name))) return lf_fail(LF_ERR_NOMEM, "out of memory listing inputs");
    return LF_OK;
}

/* A directory: the files lf__dataset_dir_expand picks (dataset_dir.c: hub
 * repositories, save_to_disk directories, plain trees), with their splits. */
static lf_status add_dir(prep *p, const char *dir) {
    lf__input_file *f = NULL;
    size_t n = 0;
    lf_status st = lf__dataset_dir_expand(dir, p->o->format, p->o->subset, &f, &n);
    for (size_t i = 0; i < n && st == LF_OK; i++) {
        struct stat sb;
        if (stat(f[i].path, &sb) != 0)
            st = lf_fail(LF_ERR_IO, "input '%s': cannot stat: %s", f[i].path, strerror(errno));
        else if ((st = add_source(p, f[i].path, (uint64_t)sb.st_size)) == LF_OK)
            st = set_source_split(&p->src[p->n_src - 1], f[i].split, f[i].split_name);
    }
    lf__input_files_free(f, n);
    return st;
}

static lf_status expand_inputs(prep *p) {
    for (size_t i = 0; i < p->o->n_inputs; i++) {
        const char *in = p->o->inputs[i];
        if (!in || !*in) return lf_fail(LF_ERR_INVALID_ARG, "prepare: input %zu is an empty path", i + 1);
        struct stat sb;
        if (stat(in, &sb) != 0)
            return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "input '%s': %s", in, strerror(errno));
        lf_status st = S_ISDIR(sb.st_mode) ? add_dir(p, in) : add_source(p, in, (uint64_t)sb.st_size);
        if (st == LF_OK && !S_ISDIR(sb.st_mode)) { /* a file's own name may tell its split */
            const char *w = NULL;
            size_t wl = 0;
            char name[64] = "";
            int sp = lf__split_of_path(in, 0, &w, &wl);
            if (w) snprintf(name, sizeof name, "%.*s", (int)(wl < 63 ? wl : 63), w);
            st = set_source_split(&p->src[p->n_src - 1], sp, w ? name : NULL);
        }
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

/* keep_splits: every source must belong to train, val or test. */
static lf_status check_kept_splits(const prep *p) {
    for (size_t i = 0; i < p->n_src; i++) {
        const source *s = &p->src[i];
        if (s->split != LF__SPLIT_NONE) continue;
        if (s->split_name)
            return lf_fail(LF_ERR_INVALID_ARG,
                           "prepare: keeping the dataset's splits, but '%s' is its split '%s', which is none of "
                           "train, validation (valid, val, dev) or test",
                           s->path, s->split_name);
        return lf_fail(LF_ERR_INVALID_ARG,
                       "prepare: keeping the dataset's splits, but the name of '%s' tells no split (train, "
                       "validation, test in the file or directory name, a configs: header or save_to_disk's split)",
                       s->path);
    }
    return LF_OK;
}

static lf_reader_opts reader_opts(const prep *p) {
    lf_reader_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.format = p->o->format;
    ro.mode = p->o->mode;
    ro.text_field = p->o->text_field;
    ro.prompt_field = p->o->prompt_field;
    ro.response_field = p->o->response_field;
    ro.rejected_field = p->o->rejected_field;
    ro.skip_bad_records = p->o->skip_bad_records;
    ro.max_record_bytes = p->o->max_record_bytes;
    ro.json_field = p->o->json_field;
    return ro;
}

static void progress(prep *p, uint64_t done, int finished) {
    if (!p->o->progress) return;
    lf_prepare_progress g;
    memset(&g, 0, sizeof g);
    g.bytes_total = p->bytes_total * (uint64_t)p->passes;
    g.bytes_done = done < g.bytes_total ? done : g.bytes_total;
    for (int s = 0; s < LF_PREPARE_N_SPLITS; s++) {
        g.records += p->records[s];
        g.tokens += lf_split_writer_num_tokens(p->sw[s]);
    }
    g.skipped = p->skipped;
    g.seconds = lf_time_now() - p->t0;
    g.pass = p->pass;
    g.passes = p->passes;
    g.done = finished;
    p->o->progress(&g, p->o->progress_user);
}

/* The input position over all passes: the files finished plus the part of
 * the current one its reader has consumed (never more than its size). */
static uint64_t position(const prep *p, const lf_reader *r, const source *s) {
    uint64_t at = r ? lf_reader_bytes_read(r) : 0;
    return p->bytes_base + (at < s->bytes ? at : s->bytes);
}

/* Remove the dataset.json of an earlier run before the first file of this
 * one is written into out_dir: from then on it would describe files that
 * are being replaced. */
static lf_status retire_manifest(prep *p) {
    if (p->retired) return LF_OK;
    lf_status st = LF_OK;
    /* the earlier run's chat template goes with its manifest: a template on
     * disk is always this dataset's */
    static const char *const files[] = {"dataset.json", LF__CHAT_TEMPLATE_FILE};
    for (int i = 0; i < 2 && st == LF_OK; i++) {
        char *path = lf__path_join(p->out_dir, files[i]);
        if (!path) return lf_fail(LF_ERR_NOMEM, "out of memory");
        if (unlink(path) != 0 && errno != ENOENT)
            st = lf_fail(LF_ERR_IO, "prepare: cannot remove the earlier '%s': %s", path, strerror(errno));
        free(path);
    }
    if (st == LF_OK) p->retired = 1;
    return st;
}

/* ---------------------------------------------------------------- skipped records */
static void note_skip(prep *p, source *src, const char *msg) {
    if (p->skipped == 0) snprintf(p->first_skip, sizeof p->first_skip, "%s", msg);
    p->skipped++;
    src->skipped++;
    if (p->o->on_skip) p->o->on_skip(msg, p->o->on_skip_user);
}

/* ---------------------------------------------------------------- pass 1: character vocabulary */
static void mark_chars(uint8_t *seen, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp = u[i];
        int k = 1;
        if (cp >= 0x80) {
            const char *why;
            k = lf__utf8_decode(u + i, n - i, &cp, &why);
            if (k == 0) return; /* readers hand out valid UTF-8 only */
        }
        seen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
        i += (size_t)k;
    }
}

/* A conversation's rendering (the template's own text around it) joins
 * the vocabulary; one that does not render is left to pass 2, which
 * reports it. */
static void mark_conversation(const prep *p, uint8_t *seen, const lf_record *rec) {
    char *conv = rec->messages ? NULL : lf__prepare_pair_messages(rec->prompt, rec->response), *out = NULL;
    cJSON *msgs = cJSON_Parse(conv ? conv : rec->messages);
    size_t len = 0;
    if (msgs && lf__chat_template_render_json(&p->tpl, msgs, -1, 1, &out, &len, NULL, NULL) == LF_OK)
        mark_chars(seen, out, len);
    free(out);
    cJSON_Delete(msgs);
    cJSON_free(conv);
}

static lf_status build_char_vocab(prep *p) {
    lf_status st = LF_OK;
    uint8_t *seen = calloc(N_CODE_POINTS / 8, 1);
    uint32_t *cps = NULL;
    char *json = NULL, *path = NULL;
    lf_reader *r = NULL;
    if (!seen) return lf_fail(LF_ERR_NOMEM, "out of memory building a character vocabulary");
    lf_reader_opts ro = reader_opts(p);
    p->pass = 1;
    if (p->has_tpl && !p->tpl.jinja) { /* the template's text, which renders around every pair */
        char *out = NULL;
        size_t len = 0, cut = 0;
        if ((st = lf__chat_template_render_pair(&p->tpl, "", 0, "", 0, &out, &len, &cut, NULL, NULL)) != LF_OK) {
            free(seen);
            return st;
        }
        mark_chars(seen, out, len);
        free(out);
    }
    for (size_t i = 0; i < p->n_src && st == LF_OK; i++) {
        source *s = &p->src[i];
        if ((st = lf_reader_open(&r, s->path, &ro)) != LF_OK) break;
        uint64_t last = 0;
        for (;;) {
            lf_record rec;
            int eof;
            if ((st = lf_reader_next(r, &rec, &eof)) != LF_OK || eof) break;
            if (rec.text) mark_chars(seen, rec.text, rec.text_len);
            if (rec.prompt) mark_chars(seen, rec.prompt, rec.prompt_len);
            if (rec.response) mark_chars(seen, rec.response, rec.response_len);
            if (rec.rejected) mark_chars(seen, rec.rejected, rec.rejected_len);
            if (p->has_tpl && (rec.messages || p->tpl.jinja)) mark_conversation(p, seen, &rec);

            uint64_t at = position(p, r, s);
            if (at - last >= PROGRESS_EVERY) {
                last = at;
                progress(p, at, 0);
            }
        }
        p->bytes_base += s->bytes;
        progress(p, p->bytes_base, 0);
        lf_reader_close(r);
        r = NULL;
    }
    if (st != LF_OK) goto done;
    seen['\n' >> 3] |= (uint8_t)(1u << ('\n' & 7)); /* the end-of-text of character vocabularies */
    size_t V = 0;
    for (uint32_t w = 0; w < N_CODE_POINTS / 8; w++)
        for (uint8_t b = seen[w]; b; b &= (uint8_t)(b - 1)) V++;
    if (!(cps = malloc(V * sizeof *cps))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory building a character vocabulary");
        goto done;
    }
    V = 0;
    for (uint32_t cp = 0; cp < N_CODE_POINTS; cp++)
        if (seen[cp >> 3] & (1u << (cp & 7))) cps[V++] = cp;
    if ((st = lf__char_vocab_json(cps, V, &json)) != LF_OK) goto done;
    if (!(path = lf__path_join(p->out_dir, "vocab.json"))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory building a character vocabulary");
        goto done;
    }
    if ((st = retire_manifest(p)) != LF_OK) goto done;
    if ((st = lf__file_write_atomic(path, json, strlen(json))) != LF_OK) goto done;
    lf_sha256_hex(json, strlen(json), p->tok_sha);
done:
    lf_reader_close(r);
    free(seen);
    free(cps);
    cJSON_free(json);
    free(path);
    return st;
}

/* ---------------------------------------------------------------- tokenizer */
static lf_status set_spec_out(prep *p, const char *s) {
    free(p->spec_out);
    if (!(p->spec_out = malloc(strlen(s) + 1))) return lf_fail(LF_ERR_NOMEM, "out of memory");
    strcpy(p->spec_out, s);
    return LF_OK;
}

/* "char:FILE": copy FILE into out_dir/vocab.json (unless it is that file). */
static lf_status copy_char_vocab(prep *p, const char *file) {
    lf_status st = LF_OK;
    char *dst = lf__path_join(p->out_dir, "vocab.json"), *a = NULL, *b = NULL, *buf = NULL;
    size_t len = 0;
    if (!dst) return lf_fail(LF_ERR_NOMEM, "out of memory");
    a = realpath(file, NULL);
    b = realpath(dst, NULL);
    if ((st = lf_file_read_all(file, VOCAB_FILE_MAX_BYTES, &buf, &len)) != LF_OK) {
        lf_error_prefix("char vocabulary '%s'", file);
        goto done;
    }
    if (!(a && b && strcmp(a, b) == 0) && (st = retire_manifest(p)) == LF_OK) st = lf__file_write_atomic(dst, buf, len);
    if (st == LF_OK) lf_sha256_hex(buf, len, p->tok_sha);
done:
    lf_free(buf);
    free(dst);
    free(a);
    free(b);
    return st;
}

/* The spec as dataset.json records it: the file by absolute path, or
 * relative to out_dir when it lies inside it; sha256 when it is one file. */
static lf_status record_spec(prep *p, const char *spec) {
    const char *colon = strchr(spec, ':');
    if (!colon || !colon[1]) return set_spec_out(p, spec);
    char *abs = realpath(colon + 1, NULL), *od = realpath(p->out_dir, NULL);
    lf_status st = LF_OK;
    if (!abs) {
        st = set_spec_out(p, spec); /* not a path (the tokenizer opened it anyway) */
        goto done;
    }
    const char *arg = abs;
    size_t nd = od ? strlen(od) : 0;
    if (od && strncmp(abs, od, nd) == 0 && abs[nd] == '/') arg = abs + nd + 1;
    size_t np = (size_t)(colon - spec) + 1;
    char *s = malloc(np + strlen(arg) + 1);
    if (!s) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory");
        goto done;
    }
    memcpy(s, spec, np);
    strcpy(s + np, arg);
    free(p->spec_out);
    p->spec_out = s;
    struct stat sb;
    if (stat(abs, &sb) == 0 && S_ISREG(sb.st_mode)) st = lf_sha256_file_hex(abs, p->tok_sha);
    if (stat(abs, &sb) == 0 && S_ISDIR(sb.st_mode) && strncmp(spec, "gpt2:", 5) == 0) {
        /* the GPT-2 files, each hashed (dataset.json "tokenizer.files") */
        for (int i = 0; i < 2 && st == LF_OK; i++) {
            char *f = lf__path_join(abs, lf__gpt2_files[i]);
            st = f ? lf_sha256_file_hex(f, p->tok_file_sha[i]) : lf_fail(LF_ERR_NOMEM, "out of memory");
            free(f);
        }
    }
done:
    free(abs);
    free(od);
    return st;
}

static lf_status open_tokenizer(prep *p) {
    const char *spec = p->o->tokenizer;
    lf_status st;
    if (strcmp(spec, "char") == 0) {
        if ((st = build_char_vocab(p)) != LF_OK) return st;
        if ((st = set_spec_out(p, "char:vocab.json")) != LF_OK) return st;
        st = lf_tokenizer_open(&p->tok, "char:vocab.json", p->out_dir);
    } else if (strncmp(spec, "char:", 5) == 0 && spec[5]) {
        if ((st = copy_char_vocab(p, spec + 5)) != LF_OK) return st;
        if ((st = set_spec_out(p, "char:vocab.json")) != LF_OK) return st;
        st = lf_tokenizer_open(&p->tok, "char:vocab.json", p->out_dir);
    } else {
        if ((st = lf_tokenizer_open(&p->tok, spec, NULL)) != LF_OK) return st;
        st = record_spec(p, spec);
    }
    if (st != LF_OK) return st;
    p->V = lf_tokenizer_vocab_size(p->tok);
    p->eot = lf_tokenizer_eot(p->tok);
    if (p->eot < 0)
        return lf_fail(
            LF_ERR_INVALID_ARG,
            "tokenizer '%s' has no end-of-text token to end each record (a character vocabulary needs \"\\n\")", spec);
    if (p->V < 1) return lf_fail(LF_ERR_INTERNAL, "tokenizer '%s' reports vocabulary size %d", spec, p->V);
    return LF_OK;
}

/* ---------------------------------------------------------------- batches */
static void batch_reset(prep *p, batch *b) {
    for (size_t i = 0; i < b->n; i++) {
        lf_free(b->it[i].ids);
        free(b->it[i].mask);
        free(b->it[i].msg);
    }
    b->n = 0;
    b->alen = 0;
    b->bytes = 0;
    atomic_store(&b->next, 0);
    /* a huge record grew the arena: give it back rather than keep it */
    if (b->acap > 2 * p->batch_bytes + ((size_t)1 << 20)) {
        free(b->arena);
        b->arena = NULL;
        b->acap = 0;
    }
}

static void batch_free(batch *b) {
    for (size_t i = 0; i < b->n; i++) {
        lf_free(b->it[i].ids);
        free(b->it[i].mask);
        free(b->it[i].msg);
    }
    free(b->it);
    free(b->arena);
    memset(b, 0, sizeof *b);
}

/* A new zeroed item (its strings not yet placed). */
static item *batch_item(batch *b) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        item *ni = realloc(b->it, cap * sizeof *ni);
        if (!ni) return NULL;
        b->it = ni;
        b->cap = cap;
    }
    item *it = &b->it[b->n++];
    memset(it, 0, sizeof *it);
    it->ka_off = it->kb_off = NO_KEY;
    b->bytes += sizeof *it;
    return it;
}

/* Copy s[0, n) and a NUL into the arena; *off is where it starts. */
static int arena_put(batch *b, const char *s, size_t n, size_t *off) {
    if (n + 1 > b->acap - b->alen) {
        size_t cap = b->acap ? b->acap : (size_t)1 << 16;
        while (cap - b->alen < n + 1) {
            if (cap > SIZE_MAX / 2) return -1;
            cap *= 2;
        }
        char *na = realloc(b->arena, cap);
        if (!na) return -1;
        b->arena = na;
        b->acap = cap;
    }
    *off = b->alen;
    if (n) memcpy(b->arena + b->alen, s, n);
    b->arena[b->alen + n] = 0;
    b->alen += n + 1;
    b->bytes += n + 1;
    return 0;
}

static lf_status batch_add_record(prep *p, batch *b, const lf_record *rec) {
    if (p->sft && rec->messages && !p->has_tpl)
        return lf_fail(LF_ERR_INVALID_ARG,
                       "%s:%llu: a record with 'messages' is rendered by a chat template: give prepare "
                       "--chat-template (the model's directory, its tokenizer_config.json or chat_template.jinja, "
                       "or a chat_template.json)",
                       p->src[p->cur_src].path, (unsigned long long)rec->line);
    char *conv = NULL; /* a pair as a conversation, for a Jinja template */
    if (p->sft && !p->dpo && !rec->messages && p->has_tpl && p->tpl.jinja && /* dpo: render_pair, twice */
        !(conv = lf__prepare_pair_messages(rec->prompt, rec->response)))
        return lf_fail(LF_ERR_NOMEM, "out of memory gathering records");
    item *it = batch_item(b);
    if (!it) {
        cJSON_free(conv);
        return lf_fail(LF_ERR_NOMEM, "out of memory gathering records");
    }
    it->src = p->cur_src;
    it->kind = ITEM_RECORD;
    it->line = rec->line;
    int bad = 0;
    const char *ka = p->sft ? rec->prompt_key : rec->text_key;
    if (p->sft && (rec->messages || conv)) {
        /* the conversation, NUL, an empty response: the split key is the conversation */
        bad |= arena_put(b, conv ? conv : rec->messages, conv ? strlen(conv) : rec->messages_len, &it->a_off);
        bad |= arena_put(b, "", 0, &it->b_off);
        it->a_len = conv ? strlen(conv) : rec->messages_len;
        it->msgs = 1;
        cJSON_free(conv);
    } else if (p->sft) {
        /* prompt, NUL, response: the split key is the bytes between */
        bad |= arena_put(b, rec->prompt, rec->prompt_len, &it->a_off);
        bad |= arena_put(b, rec->response, rec->response_len, &it->b_off);
        it->a_len = rec->prompt_len;
        it->b_len = rec->response_len;
        if (p->dpo) { /* prompt 0x00 chosen 0x00 rejected: the split key keeps the triple together */
            bad |= arena_put(b, rec->rejected, rec->rejected_len, &it->c_off);
            it->c_len = rec->rejected_len;
            bad |= arena_put(b, rec->rejected_key, strlen(rec->rejected_key), &it->kc_off);
        }
        if (rec->response_key) bad |= arena_put(b, rec->response_key, strlen(rec->response_key), &it->kb_off);
    } else {
        bad |= arena_put(b, rec->text, rec->text_len, &it->a_off);
        it->a_len = rec->text_len;
    }
    if (ka) bad |= arena_put(b, ka, strlen(ka), &it->ka_off);
    if (bad) return lf_fail(LF_ERR_NOMEM, "out of memory gathering records (%zu bytes)", b->alen);
    it->large = p->n_threads > 1 && it->a_len + it->b_len + it->c_len >= LF_PREPARE_LARGE_RECORD_BYTES;
    return LF_OK;
}

/* The reader skipped a record: keep its message in its place. */
static void on_reader_skip(const char *msg, void *user) {
    prep *p = user;
    batch *b = p->fill;
    item *it = batch_item(b);
    if (!it || arena_put(b, msg, strlen(msg), &it->ka_off) != 0) {
        if (it) b->n--;
        if (p->fill_err == LF_OK) p->fill_err = lf_fail(LF_ERR_NOMEM, "out of memory noting a skipped record");
        return;
    }
    it->src = p->cur_src;
    it->kind = ITEM_SKIP;
}


/* split_shuffle: the records every source yields (as the reading pass will
 * see them: the same reader options), for the exact counts. */
static lf_status count_records(prep *p) {
    lf_reader_opts ro = reader_opts(p);
    ro.on_skip = NULL; /* the reading pass reports skips */
    lf_status st = LF_OK;
    uint64_t n = 0;
    for (size_t i = 0; i < p->n_src && st == LF_OK; i++) {
        lf_reader *r = NULL;
        if ((st = lf_reader_open(&r, p->src[i].path, &ro)) != LF_OK) break;
        for (;;) {
            lf_record rec;
            int eof;
            if ((st = lf_reader_next(r, &rec, &eof)) != LF_OK || eof) break;
            n++;
        }
        lf_reader_close(r);
    }
    if (st != LF_OK) return st;
    p->shuf_n = n;
    lf__split_counts(n, p->w, p->shuf_counts);
    return LF_OK;
}

/* ---------------------------------------------------------------- commit (calling thread) */
/* Finish encoding b (its large records on all threads), then write it in
 * input order; b is reset either way. */
static lf_status commit(prep *p, batch *b) {
    lf_status st = LF_OK;
    if (p->pl && b == p->inflight) lf__prep_pool_wait(p, p->pl, b);
    else lf__prep_encode_batch(p, b);
    if (b == p->inflight) p->inflight = NULL;
    for (size_t i = 0; i < b->n && st == LF_OK; i++) {
        item *it = &b->it[i];
        source *src = &p->src[it->src];
        if (it->kind == ITEM_SKIP) {
            note_skip(p, src, b->arena + it->ka_off);
            continue;
        }
        const uint64_t rec_i = p->shuf_i++; /* the record's index among those the readers yield */
        if (it->large) lf__prep_encode_item(p, b, it, p->n_threads);
        if (it->st != LF_OK) {
            st = lf_fail(it->st, "%s", it->msg ? it->msg : lf_status_str(it->st));
            break;
        }
        if (it->bad) {
            note_skip(p, src, it->msg);
            continue;
        }
        const int s = p->o->split_shuffle ? lf__split_shuffled(rec_i, p->shuf_n, p->o->split_seed, p->shuf_counts)
                                          : it->split;
        if ((st = retire_manifest(p)) != LF_OK) break;
        if ((st = lf_split_writer_append(p->sw[s], it->ids, it->mask, it->n)) != LF_OK) break;
        if (!p->sft) {
            const uint32_t eot = (uint32_t)p->eot;
            if ((st = lf_split_writer_append(p->sw[s], &eot, NULL, 1)) != LF_OK) break;
        }
        p->records[s]++;
        p->targets[s] += it->targets;
        src->records++;
        /* the ids are not needed any more: free them now, not at the reset */
        lf_free(it->ids);
        free(it->mask);
        it->ids = NULL;
        it->mask = NULL;
    }
    uint64_t at = b->bytes_at;
    batch_reset(p, b);
    if (st == LF_OK) progress(p, at, 0);
    return st;
}

/* The filling batch is complete: commit the one in flight, then hand this
 * one to the pool (or, with one thread, commit it now). */
static lf_status dispatch(prep *p) {
    lf_status st = LF_OK;
    if (p->inflight && (st = commit(p, p->inflight)) != LF_OK) return st;
    batch *b = p->fill;
    if (b->n == 0) return LF_OK;
    if (!p->pl) return commit(p, b);
    lf__prep_pool_start(p->pl, b);
    p->inflight = b;
    p->fill = b == &p->b[0] ? &p->b[1] : &p->b[0];
    return LF_OK;
}

/* ---------------------------------------------------------------- source hashes */
/* The SHA-256 of every source for dataset.json: a whole extra read of the
 * input, done by a thread of its own beside the encoding when there are
 * threads, else after it. Its errors come after every other one either way. */
typedef struct hasher {
    prep *p;
    lf_status st;
    char msg[1024];
} hasher;

static void *hash_sources(void *arg) {
    hasher *h = arg;
    h->st = LF_OK;
    for (size_t i = 0; i < h->p->n_src && h->st == LF_OK; i++)
        if ((h->st = lf_sha256_file_hex(h->p->src[i].path, h->p->src[i].sha256)) != LF_OK)
            snprintf(h->msg, sizeof h->msg, "%s", lf_last_error());
    return NULL;
}

/* ---------------------------------------------------------------- pass 2: encode */
/* Read every source into batches. An error of the calling thread (a file
 * that cannot be opened or read, a broken record) is returned only after
 * the records before it are written: an earlier record's error wins, as it
 * would on one thread. */
static lf_status encode_all(prep *p) {
    lf_status st = LF_OK, rerr = LF_OK;
    char rmsg[1024] = "";
    lf_reader *r = NULL;
    lf_reader_opts ro = reader_opts(p);
    ro.on_skip = on_reader_skip;
    ro.on_skip_user = p;
    p->pass = p->passes;
    p->fill = &p->b[0];
    hasher h = {.p = p};
    pthread_t hash_thread;
    const int hashing = p->pl && pthread_create(&hash_thread, NULL, hash_sources, &h) == 0;
    for (size_t i = 0; i < p->n_src && rerr == LF_OK && st == LF_OK; i++) {
        source *src = &p->src[i];
        p->cur_src = (uint32_t)i;
        if ((rerr = lf_reader_open(&r, src->path, &ro)) != LF_OK) break;
        src->fmt = lf_reader_format(r);
        for (;;) {
            lf_record rec;
            int eof;
            if ((rerr = lf_reader_next(r, &rec, &eof)) != LF_OK) break;
            if ((rerr = p->fill_err) != LF_OK) break;
            if (eof) break;
            if ((rerr = batch_add_record(p, p->fill, &rec)) != LF_OK) break;
            if (p->fill->bytes >= p->batch_bytes) {
                p->fill->bytes_at = position(p, r, src);
                if ((st = dispatch(p)) != LF_OK) break;
            }
        }
        lf_reader_close(r);
        r = NULL;
        p->bytes_base += src->bytes;
        p->fill->bytes_at = p->bytes_base;
    }
    if (rerr != LF_OK) snprintf(rmsg, sizeof rmsg, "%s", lf_last_error());
    if (st == LF_OK) st = dispatch(p);
    if (st == LF_OK && p->inflight) st = commit(p, p->inflight);
    if (st == LF_OK && rerr != LF_OK) st = lf_fail(rerr, "%s", rmsg);
    if (hashing) pthread_join(hash_thread, NULL);
    else if (st == LF_OK) hash_sources(&h);
    if (st == LF_OK && h.st != LF_OK) st = lf_fail(h.st, "%s", h.msg);
    return st;
}

/* ---------------------------------------------------------------- manifest */
/* out_dir/chat_template.json: the template the pairs were rendered with,
 * before dataset.json (which names it) and after every shard. */
static lf_status write_template(prep *p) {
    char *text = NULL, *path = NULL;
    size_t len = 0;
    lf_status st = lf__chat_template_json(&p->tpl, &text, &len);
    if (st == LF_OK && !(path = lf__path_join(p->out_dir, LF__CHAT_TEMPLATE_FILE)))
        st = lf_fail(LF_ERR_NOMEM, "out of memory");
    if (st == LF_OK) st = retire_manifest(p);
    if (st == LF_OK) st = lf__file_write_atomic(path, text, len);
    if (st == LF_OK) lf_sha256_hex(text, len, p->tpl_sha);
    free(text);
    free(path);
    return st;
}

static lf_status write_manifest(prep *p) {
    lf_status st = LF_OK;
    char *text = NULL, *path = NULL;
    cJSON *root = cJSON_CreateObject(), *tok = NULL, *splits = NULL, *rule = NULL, *arr = NULL, *sources = NULL;
    int ok = root != NULL;
    ok = ok && cJSON_AddStringToObject(root, "format", "llmforge-dataset");
    ok = ok && cJSON_AddNumberToObject(root, "version", 1);
    ok = ok && (tok = cJSON_AddObjectToObject(root, "tokenizer"));
    ok = ok && cJSON_AddStringToObject(tok, "spec", p->spec_out);
    if (ok && p->tok_sha[0]) ok = cJSON_AddStringToObject(tok, "sha256", p->tok_sha) != NULL;
    if (ok && p->tok_file_sha[0][0]) {
        cJSON *files = cJSON_AddObjectToObject(tok, "files");
        ok = files != NULL;
        for (int i = 0; ok && i < 2; i++)
            ok = cJSON_AddStringToObject(files, lf__gpt2_files[i], p->tok_file_sha[i]) != NULL;
    }
    ok = ok && cJSON_AddNumberToObject(root, "vocab_size", p->V);
    ok = ok && cJSON_AddNumberToObject(root, "eot", p->eot);
    ok = ok && cJSON_AddStringToObject(root, "mode", p->dpo ? "dpo" : p->sft ? "sft" : "pretrain");
    if (ok && p->has_tpl) {
        cJSON *ct = cJSON_AddObjectToObject(root, "chat_template");
        ok = ct && cJSON_AddStringToObject(ct, "file", LF__CHAT_TEMPLATE_FILE) &&
             cJSON_AddStringToObject(ct, "source", p->tpl.source) && cJSON_AddStringToObject(ct, "sha256", p->tpl_sha);
    }
    ok = ok && (splits = cJSON_AddObjectToObject(root, "splits"));
    uint64_t total = 0;
    for (int s = 0; s < LF_PREPARE_N_SPLITS && ok; s++) {
        const lf_split_writer *w = p->sw[s];
        total += p->records[s];
        uint64_t n_shards = lf_split_writer_num_shards(w);
        if (n_shards == 0) continue;
        cJSON *o = cJSON_AddObjectToObject(splits, g_split_names[s]),
              *sh = o ? cJSON_AddArrayToObject(o, "shards") : NULL;
        ok = sh != NULL;
        for (uint64_t k = 0; k < n_shards && ok; k++) {
            char name[512];
            if (lf_split_writer_shard_name(w, k, name, sizeof name) != LF_OK) {
                cJSON_Delete(root);
                return lf_fail(LF_ERR_INTERNAL, "prepare: shard name %llu of split '%s' does not fit",
                               (unsigned long long)k, g_split_names[s]);
            }
            cJSON *js = cJSON_CreateString(name);
            ok = js && cJSON_AddItemToArray(sh, js);
            if (!ok) cJSON_Delete(js);
        }
        ok = ok && cJSON_AddNumberToObject(o, "tokens", (double)lf_split_writer_num_tokens(w));
        ok = ok && cJSON_AddNumberToObject(o, "records", (double)p->records[s]);
        ok = ok && cJSON_AddNumberToObject(o, "target_tokens", (double)p->targets[s]);
    }
    ok = ok && (rule = cJSON_AddObjectToObject(root, "split"));
    ok = ok && cJSON_AddStringToObject(rule, "method",
                                       p->o->keep_splits     ? "kept"
                                       : p->o->split_shuffle ? "shuffle"
                                                             : "sha256");
    if (p->o->split_shuffle) {
        ok = ok && cJSON_AddNumberToObject(rule, "seed", (double)p->o->split_seed);
        ok = ok && cJSON_AddNumberToObject(rule, "records", (double)p->shuf_n);
    }
    ok = ok && (arr = cJSON_AddArrayToObject(rule, "fractions"));
    for (int s = 0; s < LF_PREPARE_N_SPLITS && ok && !p->o->keep_splits; s++) {
        cJSON *v = cJSON_CreateNumber(p->w[s]);
        ok = v && cJSON_AddItemToArray(arr, v);
        if (!ok) cJSON_Delete(v);
    }
    ok = ok && cJSON_AddNumberToObject(root, "records", (double)total);
    ok = ok && cJSON_AddNumberToObject(root, "skipped_records", (double)p->skipped);
    ok = ok && (sources = cJSON_AddArrayToObject(root, "sources"));
    for (size_t i = 0; i < p->n_src && ok; i++) {
        const source *s = &p->src[i];
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(sources, o);
        if (!ok) cJSON_Delete(o);
        ok = ok && cJSON_AddStringToObject(o, "path", s->path);
        ok = ok && cJSON_AddStringToObject(o, "sha256", s->sha256);
        ok = ok && cJSON_AddNumberToObject(o, "bytes", (double)s->bytes);
        ok = ok && cJSON_AddStringToObject(o, "format", lf_input_format_name(s->fmt));
        ok = ok && cJSON_AddNumberToObject(o, "records", (double)s->records);
        ok = ok && cJSON_AddNumberToObject(o, "skipped", (double)s->skipped);
        if (ok && s->split_name) ok = cJSON_AddStringToObject(o, "split", s->split_name) != NULL;
    }
    if (ok) text = lf_json_print(root, 1); /* split weights read back exactly */
    cJSON_Delete(root);
    if (!text || !(path = lf__path_join(p->out_dir, "dataset.json"))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory building dataset.json");
        goto done;
    }
    st = lf__file_write_atomic(path, text, strlen(text));
done:
    cJSON_free(text);
    free(path);
    return st;
}

/* ---------------------------------------------------------------- entry */
static lf_status check_opts(const lf_prepare_opts *o, const char *out_dir, double w[LF_PREPARE_N_SPLITS]) {
    if (!o) return lf_fail(LF_ERR_INVALID_ARG, "lf_prepare: opts is NULL");
    if (!out_dir || !*out_dir) return lf_fail(LF_ERR_INVALID_ARG, "prepare: empty output directory");
    if (!o->inputs || o->n_inputs == 0) return lf_fail(LF_ERR_INVALID_ARG, "prepare: no inputs");
    if (!o->tokenizer || !*o->tokenizer) return lf_fail(LF_ERR_INVALID_ARG, "prepare: no tokenizer spec");
    if (o->mode != LF_RECORD_PRETRAIN && o->mode != LF_RECORD_SFT && o->mode != LF_RECORD_DPO)
        return lf_fail(LF_ERR_INVALID_ARG, "prepare: unknown mode %d", (int)o->mode);
    if (!lf_input_format_name(o->format))
        return lf_fail(LF_ERR_INVALID_ARG, "prepare: unknown format %d", (int)o->format);
    double sum = 0;
    for (int s = 0; s < LF_PREPARE_N_SPLITS; s++) {
        double v = o->split[s];
        if (!(v >= 0 && v <= 1e12))
            return lf_fail(LF_ERR_RANGE, "prepare: split weight %d (%s) is %g, must be a finite number >= 0", s,
                           g_split_names[s], v);
        sum += v;
    }
    if (!(o->split[0] > 0)) return lf_fail(LF_ERR_RANGE, "prepare: the train split weight must be > 0");
    if (o->n_threads < 0 || o->n_threads > LF_PREPARE_MAX_THREADS)
        return lf_fail(LF_ERR_RANGE, "prepare: n_threads is %d, must be 0 (the CPUs granted) .. %d", o->n_threads,
                       LF_PREPARE_MAX_THREADS);
    for (int s = 0; s < LF_PREPARE_N_SPLITS; s++) w[s] = o->split[s] / sum;
    return LF_OK;
}

lf_status lf_prepare(const lf_prepare_opts *opts, const char *out_dir, lf_prepare_result *result) {
    if (result) memset(result, 0, sizeof *result);
    prep p;
    memset(&p, 0, sizeof p);
    lf_status st = check_opts(opts, out_dir, p.w);
    if (st != LF_OK) return st;
    p.o = opts;
    p.out_dir = out_dir;
    p.t0 = lf_time_now();
    p.dpo = opts->mode == LF_RECORD_DPO;
    p.sft = opts->mode == LF_RECORD_SFT || p.dpo; /* dpo: masked prompt/response rows too */
    p.shard_tokens = opts->shard_tokens ? opts->shard_tokens : LF_PREPARE_SHARD_TOKENS;
    p.passes = strcmp(opts->tokenizer, "char") == 0 ? 2 : 1;
    p.pass = 1;
    p.eot = -1;
    p.n_threads = opts->n_threads;
    if (p.n_threads == 0) { /* the CPUs granted: affinity mask, cgroup CPU limit */
        lf_cpu_threads ct;
        const int n = lf_cpu_threads_detect(&ct);
        p.n_threads = n > LF_PREPARE_MAX_THREADS ? LF_PREPARE_MAX_THREADS : n;
    }
    p.batch_bytes = LF_PREPARE_BATCH_BYTES * (size_t)p.n_threads;
    if (p.batch_bytes > MAX_BATCH_BYTES) p.batch_bytes = MAX_BATCH_BYTES;
    for (int s = 0; s < 2; s++) atomic_init(&p.b[s].next, 0);

    if (opts->chat_template) {
        if (!p.sft) {
            st = lf_fail(LF_ERR_INVALID_ARG, "prepare: a chat template renders fine-tuning pairs (mode sft), not "
                                             "pretraining text");
            goto done;
        }
        if ((st = lf__chat_template_load(opts->chat_template, &p.tpl)) != LF_OK) goto done;
        p.has_tpl = 1;
        if (p.dpo && p.tpl.jinja) { /* a pair row is prompt then completion; a conversation's mask is per turn */
            st = lf_fail(LF_ERR_UNSUPPORTED,
                         "prepare: --mode dpo with the Jinja chat template '%s' is not supported yet (each "
                         "preference row is rendered as prompt then response, which a Jinja template does not "
                         "split); use --chat-template chatml or a chat_template.json",
                         opts->chat_template);
            goto done;
        }
    }
    if ((st = expand_inputs(&p)) != LF_OK) goto done;
    if (opts->keep_splits && (st = check_kept_splits(&p)) != LF_OK) goto done;
    if (opts->split_shuffle && opts->keep_splits) {
        st = lf_fail(LF_ERR_INVALID_ARG, "prepare: the shuffle split and --keep-splits exclude each other");
        goto done;
    }
    if (opts->split_shuffle && (st = count_records(&p)) != LF_OK) goto done;
    if ((st = lf_mkdirs(out_dir)) != LF_OK) goto done;
    if ((st = open_tokenizer(&p)) != LF_OK) goto done;
    for (int s = 0; s < LF_PREPARE_N_SPLITS; s++)
        if ((st = lf_split_writer_open(&p.sw[s], out_dir, g_split_names[s], (uint32_t)p.V, p.sft,
                                       (uint64_t)p.shard_tokens)) != LF_OK)
            goto done;
    if (p.n_threads > 1) p.pl = lf__prep_pool_create(&p, p.n_threads - 1);
    if ((st = encode_all(&p)) != LF_OK) goto done;

    uint64_t total = p.records[0] + p.records[1] + p.records[2];
    if (total == 0) {
        st = lf_fail(LF_ERR_INVALID_ARG, "prepare: the inputs hold no records (%llu skipped%s%s)",
                     (unsigned long long)p.skipped, p.skipped ? "; first: " : "", p.skipped ? p.first_skip : "");
        goto done;
    }
    if (p.records[0] == 0) {
        st = lf_fail(LF_ERR_INVALID_ARG,
                     "prepare: no record fell into the train split (%llu records, split %g/%g/%g); add records or "
                     "raise the train fraction",
                     (unsigned long long)total, p.w[0], p.w[1], p.w[2]);
        goto done;
    }
    for (int s = 0; s < LF_PREPARE_N_SPLITS; s++)
        if ((st = lf_split_writer_finish(p.sw[s])) != LF_OK) goto done;
    if (p.has_tpl && (st = write_template(&p)) != LF_OK) goto done;
    if ((st = write_manifest(&p)) != LF_OK) goto done;
    progress(&p, p.bytes_total * (uint64_t)p.passes, 1);

    if (result) {
        for (int s = 0; s < LF_PREPARE_N_SPLITS; s++) {
            result->records[s] = p.records[s];
            result->tokens[s] = lf_split_writer_num_tokens(p.sw[s]);
            result->target_tokens[s] = p.targets[s];
            result->shards[s] = lf_split_writer_num_shards(p.sw[s]);
        }
        result->skipped = p.skipped;
        result->sources = p.n_src;
        result->vocab_size = p.V;
        result->eot = p.eot;
        snprintf(result->first_skip, sizeof result->first_skip, "%s", p.first_skip);
    }
done:
    if (p.inflight && p.pl) lf__prep_pool_wait(&p, p.pl, p.inflight); /* only after an error: nothing may run on */
    lf__prep_pool_free(p.pl);
    for (int s = 0; s < LF_PREPARE_N_SPLITS; s++) {
        if (st != LF_OK) lf_split_writer_remove_shards(p.sw[s]); /* no partial dataset is left */
        lf_split_writer_free(p.sw[s]);
    }
    batch_free(&p.b[0]);
    batch_free(&p.b[1]);
    lf_tokenizer_free(p.tok);
    for (size_t i = 0; i < p.n_src; i++) {
        free(p.src[i].path);
        free(p.src[i].split_name);
    }
    free(p.src);
    free(p.spec_out);
    lf__chat_template_free(&p.tpl);
    return st;
}
