/* Shared set-up of the trainer tests: a fresh temporary directory `tmp`
 * holding `data_dir`, a char dataset prepared from the first `bytes` of Tiny
 * Shakespeare (../shared/data/tinyshakespeare.txt). Include after test_util.h
 * and llmforge/data.h; call char_fixture_setup from the group set-up and
 * char_fixture_teardown from the group tear-down. */
#ifndef LF_TEST_CHAR_FIXTURE_H
#define LF_TEST_CHAR_FIXTURE_H

static char *tmp;
static char data_dir[600];

static int char_fixture_setup(size_t bytes) {
    tmp = lf_test_tmpdir();
    char *text;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(LF_SHARED_DIR "/data/tinyshakespeare.txt", 0, &text, &len));
    char path[700];
    snprintf(path, sizeof path, "%s/small.txt", tmp);
    LF_ASSERT_OK(lf_file_write_all(path, text, bytes < len ? bytes : len));
    lf_free(text);
    snprintf(data_dir, sizeof data_dir, "%s/data", tmp);
    lf_prepare_stats ps;
    LF_ASSERT_OK(lf_prepare_char(path, data_dir, &ps));
    return 0;
}

static int char_fixture_teardown(void **state) {
    (void)state;
    lf_test_rmrf(tmp);
    free(tmp);
    return 0;
}
#endif
