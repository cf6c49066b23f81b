/*
 * The continuous-batching engine (src/serve/engine.c), both architectures:
 *  - six requests (prompts of 1 to 25 tokens, greedy and seeded top-k/top-p
 *    sampling) through 3 slots with a 16-token step budget (so they queue,
 *    join as others leave, and long prompts prefill in chunks) give exactly
 *    the tokens lf_generate gives each alone (the draws are keyed by seed and
 *    position; weights x4 keep the logits far from ties, so the ~1e-6
 *    rounding of batched products does not move a choice);
 *  - a stop token ends a sequence with "stop", reported last (stop = 1) with
 *    its log-probability record; max_tokens and a full context end it with
 *    "length";
 *  - the end-of-text record lm-evaluation-harness needs: a request (echo
 *    with logprobs, max_tokens 1) whose first sampled token is a stop token
 *    gets that token's record, the same as without the stop id, and every
 *    prompt record before it;
 *  - cancellation (lf_engine_cancel of a queued request, a callback asking to
 *    stop) frees the slot for the next; the queue bound gives LF_ERR_BUSY;
 *  - logprobs: the greedy token is the most likely, descending, <= 0;
 *  - requests submitted from 4 threads to the engine's own thread all finish
 *    with their solo tokens, and a stopped engine refuses new ones;
 *  - bad requests are refused with the sizes named;
 *  - on a batch-invariant backend instance (lf_backend_set_batch_invariant),
 *    with weights as initialised (near ties allowed), every request's tokens
 *    and log-probabilities are the same bits batched (3 slots, chunked
 *    prefill within a shared budget) as alone (one slot, its own chunks);
 *  - prompt log-probabilities (echo with logprobs): three requests with
 *    prompts of 21, 7 and 30 tokens, chunked by an 8-token step budget,
 *    beside two plain ones; every prompt position comes once, in order, the
 *    first with NaN, each equal to the log-softmax of one uncached forward
 *    over the prompt (within 2e-5 of the row's largest logit: the products
 *    see other row counts), the alternatives its top ones; the generated tokens are still lf_generate's,
 *    and max_tokens 0 scores the prompt and ends with "length".
 */
#include <pthread.h>
#include "test_util.h"
#include "llmforge/backend.h"
#include "llmforge/infer.h"
#include "llmforge/model.h"
#include "serve/engine.h"

enum { CTX = 48, MAXGEN = 16 };

static lf_model *make(lf_arch arch) {
    lf_model_config c = {.arch = arch,
                         .n_layer = 2,
                         .n_head = 4,
                         .n_embd = 64,
                         .block_size = CTX,
                         .vocab_size = 61,
                         .bias = arch == LF_ARCH_GPT2,
                         .tie_embeddings = 1};
    if (arch == LF_ARCH_LLAMA) {
        c.n_kv_head = 2;
        c.tie_embeddings = 0;
    }
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, lf_backend_get("cpu")));
    LF_ASSERT_OK(lf_model_init_weights(m, 5));
    float *p = lf_model_params(m);
    for (size_t i = 0; i < lf_model_num_params(m); i++) p[i] *= 4.0f; /* CPU backend: host memory */
    return m;
}

typedef struct job {
    int32_t prompt[CTX];
    int n_prompt, max_tokens;
    float temperature, top_p;
    int top_k;
    uint64_t seed;
    int32_t want[MAXGEN]; /* lf_generate's tokens */
    /* results */
    int32_t got[MAXGEN];
    int n_got, n_done, cancel_after;
    int n_stop, stop_at; /* tokens reported with stop = 1, and the index of the last */
    lf_engine_finish why;
    float lp[MAXGEN], top0[MAXGEN];
    int32_t top0_id[MAXGEN];
    int ordered;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} job;

static int on_token(void *user, const lf_engine_token *t) {
    job *j = user;
    if (j->n_got < MAXGEN) {
        j->got[j->n_got] = t->id;
        j->lp[j->n_got] = t->logprob;
        if (t->n_top > 0) {
            j->top0[j->n_got] = t->top_logprob[0];
            j->top0_id[j->n_got] = t->top_id[0];
        }
        for (int k = 1; k < t->n_top; k++)
            if (t->top_logprob[k] > t->top_logprob[k - 1] || t->top_logprob[k] > 0) j->ordered = 0;
    }
    if (t->stop) {
        j->n_stop++;
        j->stop_at = j->n_got;
    }
    j->n_got++;
    return j->cancel_after > 0 && j->n_got >= j->cancel_after;
}

static void on_done(void *user, lf_engine_finish why, int n_prompt, int n_gen) {
    job *j = user;
    pthread_mutex_lock(&j->mu);
    j->why = why;
    j->n_done++;
    if (n_prompt != j->n_prompt || n_gen != j->n_got) j->ordered = -100; /* counts must agree */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void job_init(job *j, lf_model *m, int n_prompt, int max_tokens, int sampled, uint64_t seed) {
    memset(j, 0, sizeof *j);
    const int V = lf_model_get_config(m)->vocab_size;
    j->n_prompt = n_prompt;
    j->max_tokens = max_tokens;
    j->seed = seed;
    j->ordered = 1;
    if (sampled) {
        j->temperature = 0.8f;
        j->top_k = 20;
        j->top_p = 0.9f;
    }
    for (int i = 0; i < n_prompt; i++)
        j->prompt[i] = (int32_t)(lf_rng_u64(seed + 77, LF_RNG_BENCH, (uint64_t)i) % (uint64_t)V);
    uint32_t pr[CTX], *out = NULL;
    size_t n_out = 0;
    for (int i = 0; i < n_prompt; i++) pr[i] = (uint32_t)j->prompt[i];
    lf_sample_opts o = {.max_new_tokens = max_tokens,
                        .temperature = j->temperature,
                        .top_k = j->top_k,
                        .seed = seed,
                        .top_p = j->top_p};
    LF_ASSERT_OK(lf_generate(m, pr, (size_t)n_prompt, &o, NULL, NULL, &out, &n_out));
    assert_int_equal(n_out, max_tokens);
    for (int i = 0; i < max_tokens; i++) j->want[i] = (int32_t)out[i];
    lf_free(out);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
}

static lf_engine_req req_of(job *j) {
    lf_engine_req r = {.prompt = j->prompt,
                       .n_prompt = j->n_prompt,
                       .max_tokens = j->max_tokens,
                       .temperature = j->temperature,
                       .top_k = j->top_k,
                       .top_p = j->top_p,
                       .seed = j->seed,
                       .logprobs = 3,
                       .on_token = on_token,
                       .on_done = on_done,
                       .user = j};
    return r;
}

static void run_until_idle(lf_engine *e) {
    int active = 1, guard = 0;
    while (active && guard++ < 10000) LF_ASSERT_OK(lf_engine_step(e, &active));
    assert_int_equal(active, 0);
}

static void matches_case(lf_arch arch) {
    lf_model *m = make(arch);
    static const int np[6] = {3, 17, 9, 1, 25, 6}, mt[6] = {10, 5, 12, 8, 6, 10};
    job jobs[6];
    for (int i = 0; i < 6; i++) job_init(&jobs[i], m, np[i], mt[i], i % 2, 100 + (uint64_t)i);
    lf_engine *e;
    lf_engine_opts o = {.max_batch = 3, .max_context = CTX, .max_queue = 8, .step_tokens = 16};
    LF_ASSERT_OK(lf_engine_create(&e, m, &o));
    for (int i = 0; i < 6; i++) {
        lf_engine_req r = req_of(&jobs[i]);
        uint64_t id;
        LF_ASSERT_OK(lf_engine_submit(e, &r, &id));
        assert_true(id > 0);
    }
    lf_engine_stats st;
    lf_engine_stats_get(e, &st);
    assert_int_equal(st.queued, 6);
    run_until_idle(e);
    for (int i = 0; i < 6; i++) {
        job *j = &jobs[i];
        assert_int_equal(j->n_done, 1);
        assert_int_equal(j->why, LF_FINISH_LENGTH);
        assert_int_equal(j->n_got, j->max_tokens);
        for (int k = 0; k < j->max_tokens; k++)
            if (j->got[k] != j->want[k])
                fail_msg("%s request %d token %d: engine %d, alone %d", lf_arch_name(arch), i, k, j->got[k],
                         j->want[k]);
        assert_int_equal(j->ordered, 1);
        for (int k = 0; k < j->n_got; k++) {
            assert_true(j->lp[k] <= 0 && j->lp[k] <= j->top0[k]);
            if (j->temperature == 0) { /* greedy: the token is the most likely one */
                assert_int_equal(j->got[k], j->top0_id[k]);
                assert_true(j->lp[k] == j->top0[k]);
            }
        }
    }
    lf_engine_stats_get(e, &st);
    assert_int_equal(st.finished, 6);
    assert_int_equal(st.generated_tokens, 10 + 5 + 12 + 8 + 6 + 10);
    assert_int_equal(st.prompt_tokens, 3 + 17 + 9 + 1 + 25 + 6);
    assert_int_equal(st.active, 0);
    assert_true(st.steps >= 12); /* at least the longest request's tokens; prompts chunked */
    lf_engine_free(e);
    lf_model_free(m);
}

static void test_matches_generate_gpt2(void **state) {
    (void)state;
    matches_case(LF_ARCH_GPT2);
}

static void test_matches_generate_llama(void **state) {
    (void)state;
    matches_case(LF_ARCH_LLAMA);
}

/* Runs the six requests through an engine of `slots` slots (all submitted at once) and returns them done. */
static void run_jobs(lf_model *m, job *jobs, int n, int slots) {
    lf_engine *e;
    lf_engine_opts o = {.max_batch = slots, .max_context = CTX, .max_queue = 8, .step_tokens = 16};
    LF_ASSERT_OK(lf_engine_create(&e, m, &o));
    for (int i = 0; i < n; i++) {
        lf_engine_req r = req_of(&jobs[i]);
        uint64_t id;
        LF_ASSERT_OK(lf_engine_submit(e, &r, &id));
    }
    run_until_idle(e);
    for (int i = 0; i < n; i++) assert_int_equal(jobs[i].n_done, 1);
    lf_engine_free(e);
}

static void invariant_case(lf_arch arch) {
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf_backend_open("cpu", &be));
    LF_ASSERT_OK(lf_backend_set_batch_invariant(be, 1));
    /* wide enough that the products run on a team of threads and past the 4-row matrix-vector path */
    lf_model_config c = {.arch = arch,
                         .n_layer = 2,
                         .n_head = 4,
                         .n_embd = 128,
                         .block_size = CTX,
                         .vocab_size = 300,
                         .bias = arch == LF_ARCH_GPT2,
                         .tie_embeddings = arch == LF_ARCH_GPT2};
    if (arch == LF_ARCH_LLAMA) c.n_kv_head = 2;
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, be));
    LF_ASSERT_OK(lf_model_init_weights(m, 9));
    static const int np[6] = {3, 17, 9, 1, 25, 6}, mt[6] = {10, 5, 12, 8, 6, 10};
    job together[6], alone[6];
    for (int i = 0; i < 6; i++) {
        job_init(&together[i], m, np[i], mt[i], i % 2, 200 + (uint64_t)i);
        job_init(&alone[i], m, np[i], mt[i], i % 2, 200 + (uint64_t)i);
    }
    run_jobs(m, together, 6, 3);
    for (int i = 0; i < 6; i++) run_jobs(m, &alone[i], 1, 1);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(together[i].n_got, mt[i]);
        assert_int_equal(alone[i].n_got, mt[i]);
        for (int k = 0; k < mt[i]; k++) {
            if (together[i].got[k] != alone[i].got[k])
                fail_msg("%s request %d token %d: batched %d, alone %d", lf_arch_name(arch), i, k, together[i].got[k],
                         alone[i].got[k]);
            if (memcmp(&together[i].lp[k], &alone[i].lp[k], sizeof(float)) ||
                memcmp(&together[i].top0[k], &alone[i].top0[k], sizeof(float)))
                fail_msg("%s request %d token %d: log-probabilities batched %.9g / %.9g, alone %.9g / %.9g",
                         lf_arch_name(arch), i, k, together[i].lp[k], together[i].top0[k], alone[i].lp[k],
                         alone[i].top0[k]);
        }
    }
    LF_ASSERT_OK(lf_backend_sync(be));
    lf_model_free(m);
    lf_backend_close(be);
}

static void test_batch_invariant_gpt2(void **state) {
    (void)state;
    invariant_case(LF_ARCH_GPT2);
}

static void test_batch_invariant_llama(void **state) {
    (void)state;
    invariant_case(LF_ARCH_LLAMA);
}

static void test_stop_length_cancel_queue(void **state) {
    (void)state;
    lf_model *m = make(LF_ARCH_LLAMA);
    lf_engine *e;
    lf_engine_opts o = {.max_batch = 1, .max_context = CTX, .max_queue = 1};
    LF_ASSERT_OK(lf_engine_create(&e, m, &o));
    /* a stop token: the reference's 4th token, absent from the first three */
    job a, b, c, d;
    job_init(&a, m, 5, 8, 0, 1);
    int k = 3;
    while (k < 8 && (a.want[k] == a.want[0] || a.want[k] == a.want[1] || a.want[k] == a.want[2])) k++;
    assert_true(k < 8);
    lf_engine_req ra = req_of(&a);
    int32_t stop = a.want[k];
    ra.stop_ids = &stop;
    ra.n_stop_ids = 1;
    job_init(&b, m, 4, 6, 1, 2);
    b.cancel_after = 3; /* its callback asks to stop */
    job_init(&c, m, 3, 4, 0, 3);
    lf_engine_req rb = req_of(&b), rc = req_of(&c);
    uint64_t ida, idb, idc;
    LF_ASSERT_OK(lf_engine_submit(e, &ra, &ida));
    LF_ASSERT_OK(lf_engine_submit(e, &rb, &idb)); /* one slot and a queue of one: two fit */
    assert_int_equal(lf_engine_submit(e, &rc, &idc), LF_ERR_BUSY);
    LF_ASSERT_ERR_CONTAINS("--max-queue 1");
    run_until_idle(e);
    assert_int_equal(a.why, LF_FINISH_STOP);
    assert_int_equal(a.n_got, k + 1); /* the stop token comes last, marked, for its record */
    for (int i = 0; i <= k; i++) assert_int_equal(a.got[i], a.want[i]);
    assert_int_equal(a.n_stop, 1);
    assert_int_equal(a.stop_at, k);
    assert_int_equal(b.n_stop, 0);
    assert_int_equal(b.why, LF_FINISH_CANCELLED);
    assert_int_equal(b.n_got, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(b.got[i], b.want[i]);
    /* a queued request cancelled before it runs: on_done with nothing generated */
    LF_ASSERT_OK(lf_engine_submit(e, &rc, &idc));
    job_init(&d, m, 2, 3, 0, 4);
    lf_engine_req rd = req_of(&d);
    uint64_t idd;
    LF_ASSERT_OK(lf_engine_submit(e, &rd, &idd));
    lf_engine_cancel(e, idd);
    run_until_idle(e);
    assert_int_equal(d.why, LF_FINISH_CANCELLED);
    assert_int_equal(d.n_got, 0);
    assert_int_equal(d.n_done, 1);
    assert_int_equal(c.why, LF_FINISH_LENGTH);
    assert_int_equal(c.n_got, 4);
    /* the context: a 40-token prompt with max_tokens 20 stops at 48 positions */
    job f;
    job_init(&f, m, 40, 8, 0, 5);
    lf_engine_req rf = req_of(&f);
    rf.max_tokens = 20;
    uint64_t idf;
    LF_ASSERT_OK(lf_engine_submit(e, &rf, &idf));
    run_until_idle(e);
    assert_int_equal(f.why, LF_FINISH_LENGTH);
    assert_int_equal(f.n_got, CTX - 40);
    for (int i = 0; i < 8; i++) assert_int_equal(f.got[i], f.want[i]);
    lf_engine_free(e);
    lf_model_free(m);
}

static void test_bad_requests(void **state) {
    (void)state;
    lf_model *m = make(LF_ARCH_GPT2);
    lf_engine *e;
    lf_engine_opts o = {.max_batch = 2, .max_context = 32, .max_queue = 4};
    LF_ASSERT_OK(lf_engine_create(&e, m, &o));
    int32_t p[40] = {0};
    lf_engine_req r = {.prompt = p, .n_prompt = 32, .max_tokens = 4};
    uint64_t id;
    assert_int_equal(lf_engine_submit(e, &r, &id), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("the prompt has 32 tokens; the context holds 32");
    r.n_prompt = 0;
    assert_int_equal(lf_engine_submit(e, &r, &id), LF_ERR_RANGE);
    r.n_prompt = 3;
    p[1] = 61;
    assert_int_equal(lf_engine_submit(e, &r, &id), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("prompt token 61 at position 1");
    p[1] = 0;
    r.temperature = -1;
    assert_int_equal(lf_engine_submit(e, &r, &id), LF_ERR_RANGE);
    r.temperature = 0;
    r.logprobs = LF_ENGINE_MAX_LOGPROBS + 1;
    assert_int_equal(lf_engine_submit(e, &r, &id), LF_ERR_RANGE);
    r.logprobs = 0;
    r.max_tokens = -1;
    assert_int_equal(lf_engine_submit(e, &r, &id), LF_ERR_RANGE);
    lf_engine_free(e);
    lf_engine_opts bad = {.max_batch = 0, .max_context = 32};
    assert_int_equal(lf_engine_create(&e, m, &bad), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("--max-batch 0");
    bad = (lf_engine_opts){.max_batch = 2, .max_context = 64};
    assert_int_equal(lf_engine_create(&e, m, &bad), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("block_size 48");
    lf_model_free(m);
}

typedef struct submitter {
    lf_engine *e;
    job *jobs;
    int n;
} submitter;

static void *submit_thread(void *arg) {
    submitter *s = arg;
    for (int i = 0; i < s->n; i++) {
        lf_engine_req r = req_of(&s->jobs[i]);
        uint64_t id;
        if (lf_engine_submit(s->e, &r, &id) != LF_OK) s->jobs[i].ordered = -1;
    }
    for (int i = 0; i < s->n; i++) { /* wait for each */
        job *j = &s->jobs[i];
        pthread_mutex_lock(&j->mu);
        while (j->n_done == 0) pthread_cond_wait(&j->cv, &j->mu);
        pthread_mutex_unlock(&j->mu);
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    lf_model *m = make(LF_ARCH_GPT2);
    lf_engine *e;
    lf_engine_opts o = {.max_batch = 3, .max_context = CTX, .max_queue = 16, .step_tokens = 12};
    LF_ASSERT_OK(lf_engine_create(&e, m, &o));
    LF_ASSERT_OK(lf_engine_start(e));
    job jobs[8];
    for (int i = 0; i < 8; i++) job_init(&jobs[i], m, 2 + 3 * i, 6 + i % 3, i % 2, 300 + (uint64_t)i);
    pthread_t th[4];
    submitter sub[4];
    for (int t = 0; t < 4; t++) {
        sub[t] = (submitter){e, jobs + 2 * t, 2};
        assert_int_equal(pthread_create(&th[t], NULL, submit_thread, &sub[t]), 0);
    }
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(jobs[i].ordered, 1);
        assert_int_equal(jobs[i].why, LF_FINISH_LENGTH);
        for (int k = 0; k < jobs[i].max_tokens; k++) assert_int_equal(jobs[i].got[k], jobs[i].want[k]);
    }
    lf_engine_stop(e, 1.0);
    job late;
    job_init(&late, m, 3, 2, 0, 9);
    lf_engine_req r = req_of(&late);
    uint64_t id;
    assert_int_equal(lf_engine_submit(e, &r, &id), LF_ERR_BUSY);
    LF_ASSERT_ERR_CONTAINS("shutting down");
    lf_engine_free(e);
    lf_model_free(m);
}

typedef struct pjob {
    job j;
    int next_pos, bad_order;
    float lp[CTX];
    int32_t top_id[CTX];
    float top_lp[CTX];
    int n_top[CTX];
} pjob;

static int on_prompt(void *user, int pos, const lf_engine_token *t) {
    pjob *p = user;
    if (pos != p->next_pos || t->id != p->j.prompt[pos] || (pos == 0 && (t->n_top != 0 || !isnan(t->logprob))))
        p->bad_order++;
    p->next_pos = pos + 1;
    p->lp[pos] = t->logprob;
    p->n_top[pos] = t->n_top;
    p->top_id[pos] = t->n_top > 0 ? t->top_id[0] : -1;
    p->top_lp[pos] = t->n_top > 0 ? t->top_logprob[0] : NAN;
    for (int k = 1; k < t->n_top; k++)
        if (t->top_logprob[k] > t->top_logprob[k - 1]) p->bad_order++;
    return 0;
}

/* The prompt's log-probabilities from one uncached forward of all its rows;
 * tol[p]: 2e-5 of the row's largest |logit| (each logit within 1e-5 of it,
 * infer.test_ragged's bound; a log-probability is a logit less the
 * log-sum-exp, which moves by no more than the largest logit error). */
static void prompt_ref(lf_model *m, const job *j, double *lp, int32_t *best, double *tol) {
    const int V = lf_model_get_config(m)->vocab_size;
    lf_session *s;
    LF_ASSERT_OK(lf_session_create(&s, m, 1, CTX, 0));
    LF_ASSERT_OK(lf_session_forward(s, j->prompt, 1, j->n_prompt, 0));
    const float *lg = lf_session_logits(s);
    for (int p = 1; p < j->n_prompt; p++) {
        const float *row = lg + (size_t)(p - 1) * V;
        double mx = -INFINITY, sum = 0, big = 0;
        int b = 0;
        for (int v = 0; v < V; v++) {
            mx = fmax(mx, row[v]);
            big = fmax(big, fabs(row[v]));
            if (row[v] > row[b]) b = v;
        }
        tol[p] = 2e-5 * big;
        for (int v = 0; v < V; v++) sum += exp((double)row[v] - mx);
        lp[p] = (double)row[j->prompt[p]] - mx - log(sum);
        best[p] = b;
    }
    lf_session_free(s);
}

static void prompt_logprobs_case(lf_arch arch) {
    lf_model *m = make(arch);
    static const int np[5] = {21, 7, 30, 5, 12}, mt[5] = {6, 0, 4, 8, 5}, scored[5] = {1, 1, 1, 0, 0};
    pjob pj[5];
    for (int i = 0; i < 5; i++) {
        memset(&pj[i], 0, sizeof pj[i]);
        job_init(&pj[i].j, m, np[i], mt[i] > 0 ? mt[i] : 1, i % 2, 500 + (uint64_t)i);
        pj[i].j.max_tokens = mt[i];
    }
    lf_engine *e;
    lf_engine_opts o = {.max_batch = 3, .max_context = CTX, .max_queue = 8, .step_tokens = 8};
    LF_ASSERT_OK(lf_engine_create(&e, m, &o));
    for (int i = 0; i < 5; i++) {
        lf_engine_req r = req_of(&pj[i].j);
        r.user = &pj[i]; /* pjob starts with its job */
        if (scored[i]) {
            r.prompt_logprobs = 1;
            r.on_prompt = on_prompt;
        }
        uint64_t id;
        LF_ASSERT_OK(lf_engine_submit(e, &r, &id));
    }
    run_until_idle(e);
    double worst = 0;
    for (int i = 0; i < 5; i++) {
        pjob *p = &pj[i];
        assert_int_equal(p->j.n_done, 1);
        assert_int_equal(p->j.why, LF_FINISH_LENGTH);
        assert_int_equal(p->j.n_got, mt[i]);
        for (int k = 0; k < mt[i]; k++)
            if (p->j.got[k] != p->j.want[k])
                fail_msg("%s request %d token %d: engine %d, alone %d", lf_arch_name(arch), i, k, p->j.got[k],
                         p->j.want[k]);
        if (!scored[i]) {
            assert_int_equal(p->next_pos, 0);
            continue;
        }
        assert_int_equal(p->bad_order, 0);
        assert_int_equal(p->next_pos, np[i]); /* every position once */
        double ref[CTX], tol[CTX];
        int32_t best[CTX];
        prompt_ref(m, &p->j, ref, best, tol);
        for (int q = 1; q < np[i]; q++) {
            const double d = fabs(p->lp[q] - ref[q]);
            worst = fmax(worst, d / tol[q]);
            if (!(d <= tol[q]))
                fail_msg("%s request %d prompt position %d: logprob %.9g, uncached forward %.9g", lf_arch_name(arch), i,
                         q, p->lp[q], ref[q]);
            assert_int_equal(p->n_top[q], 3);
            assert_int_equal(p->top_id[q], best[q]);
            assert_true(p->lp[q] <= p->top_lp[q] + 1e-6f);
        }
    }
    printf("%s: prompt logprobs vs one uncached forward, worst |diff| / tolerance = %.3g\n", lf_arch_name(arch), worst);
    lf_engine_stats st;
    lf_engine_stats_get(e, &st);
    assert_int_equal(st.generated_tokens, 6 + 0 + 4 + 8 + 5);
    /* prompt_logprobs needs its callback; max_tokens 0 may fill the context, 1 may not */
    lf_engine_req r = req_of(&pj[0].j);
    r.prompt_logprobs = 1;
    uint64_t id;
    assert_int_equal(lf_engine_submit(e, &r, &id), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("on_prompt");
    int32_t full[CTX + 1] = {0};
    r = (lf_engine_req){.prompt = full, .n_prompt = CTX, .max_tokens = 0};
    LF_ASSERT_OK(lf_engine_submit(e, &r, &id));
    r.n_prompt = CTX + 1;
    assert_int_equal(lf_engine_submit(e, &r, &id), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("the prompt has 49 tokens; the context holds 48");
    run_until_idle(e);
    lf_engine_free(e);
    lf_model_free(m);
}

static void test_prompt_logprobs_gpt2(void **state) {
    (void)state;
    prompt_logprobs_case(LF_ARCH_GPT2);
}

static void test_prompt_logprobs_llama(void **state) {
    (void)state;
    prompt_logprobs_case(LF_ARCH_LLAMA);
}

/* lm-evaluation-harness's request (echo, logprobs 1, max_tokens 1) where the
 * one sampled token is the end of text: the stop id is the greedy token, so
 * the first draw stops the sequence. Its record must come (stop = 1, after
 * every prompt record), equal to the record of the same request without the
 * stop id (same engine, one slot, same rows: the same bits). */
static void eos_record_case(lf_arch arch) {
    lf_model *m = make(arch);
    lf_engine *e;
    lf_engine_opts o = {.max_batch = 1, .max_context = CTX, .max_queue = 2};
    LF_ASSERT_OK(lf_engine_create(&e, m, &o));
    pjob with, without;
    for (int pass = 0; pass < 2; pass++) {
        pjob *p = pass ? &with : &without;
        memset(p, 0, sizeof *p);
        job_init(&p->j, m, 9, 1, 0, 900);
        lf_engine_req r = req_of(&p->j);
        r.user = p;
        r.logprobs = 1;
        r.prompt_logprobs = 1;
        r.on_prompt = on_prompt;
        const int32_t eos = p->j.want[0]; /* the greedy first token */
        if (pass) {
            r.stop_ids = &eos;
            r.n_stop_ids = 1;
        }
        uint64_t id;
        LF_ASSERT_OK(lf_engine_submit(e, &r, &id));
        run_until_idle(e);
        assert_int_equal(p->j.n_done, 1);
        assert_int_equal(p->j.why, pass ? LF_FINISH_STOP : LF_FINISH_LENGTH);
        assert_int_equal(p->next_pos, 9); /* every prompt record, before the token's */
        assert_int_equal(p->bad_order, 0);
        assert_int_equal(p->j.n_got, 1); /* the record of the sampled token */
        assert_int_equal(p->j.got[0], eos);
        assert_int_equal(p->j.n_stop, pass);
        assert_int_equal(p->j.top0_id[0], eos);
        assert_true(p->j.lp[0] <= 0 && isfinite(p->j.lp[0]));
        assert_int_equal(p->j.ordered, 1); /* on_done's counts agree: the stop token counts as generated */
    }
    assert_true(with.j.lp[0] == without.j.lp[0]);
    assert_true(with.j.top0[0] == without.j.top0[0]);
    for (int q = 1; q < 9; q++) assert_true(with.lp[q] == without.lp[q]);
    lf_engine_free(e);
    lf_model_free(m);
}

static void test_eos_record_gpt2(void **state) {
    (void)state;
    eos_record_case(LF_ARCH_GPT2);
}

static void test_eos_record_llama(void **state) {
    (void)state;
    eos_record_case(LF_ARCH_LLAMA);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_generate_gpt2),
        cmocka_unit_test(test_matches_generate_llama),
        cmocka_unit_test(test_batch_invariant_gpt2),
        cmocka_unit_test(test_batch_invariant_llama),
        cmocka_unit_test(test_stop_length_cancel_queue),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_prompt_logprobs_gpt2),
        cmocka_unit_test(test_prompt_logprobs_llama),
        cmocka_unit_test(test_eos_record_gpt2),
        cmocka_unit_test(test_eos_record_llama),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
