/* Shared scaffolding of the prepare tests (test_prepare.c,
 * test_prepare_stream.c): a per-test temporary directory g_dir, paths in it
 * that live until the test's teardown, and lf_prepare options for one input.
 * Include after test_util.h and llmforge/data.h; register tests with
 * cmocka_unit_test_setup_teardown(fn, setup, teardown). */
#ifndef LF_TEST_PREPARE_FIXTURE_H
#define LF_TEST_PREPARE_FIXTURE_H

static char *g_dir;        /* per-test temporary directory */
static char *g_paths[512]; /* paths handed out by join2/path_in, freed at teardown */
static int g_n_paths;

static int setup(void **state) {
    (void)state;
    g_dir = lf_test_tmpdir();
    return g_dir ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    lf_test_rmrf(g_dir);
    free(g_dir);
    for (int i = 0; i < g_n_paths; i++) free(g_paths[i]);
    g_n_paths = 0;
    return 0;
}

/* dir/name, valid until the end of the test. */
static const char *join2(const char *dir, const char *name) {
    if (g_n_paths == (int)(sizeof g_paths / sizeof g_paths[0])) fail_msg("too many paths");
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    g_paths[g_n_paths++] = p;
    return p;
}

/* g_dir/name, valid until the end of the test. */
static const char *path_in(const char *name) { return join2(g_dir, name); }

/* Options for one input file (the array lives until the next call). */
static lf_prepare_opts opts1(const char *input, lf_record_mode mode, const char *tok) {
    static const char *inputs[1];
    inputs[0] = input;
    lf_prepare_opts o = lf_prepare_opts_default();
    o.inputs = inputs;
    o.n_inputs = 1;
    o.mode = mode;
    o.tokenizer = tok;
    return o;
}
#endif
