# Shared by the CLI tests (sourced, not run): the pass/fail counters and the
# per-test temporary directory every tests/cli/test_*.sh uses.
#   . "$(dirname "$0")/cli_lib.sh"
#   cli_tmpdir NAME     a fresh $TMPDIR/lf_cli_NAME.XXXXXX, removed on exit, made the cwd
# fail MSG prints "FAIL: MSG" and the closing count line, and exits 1; ok counts a check.

passed=0
fail() {
    echo "FAIL: $*" >&2
    echo "$passed passed, 1 failed" >&2
    exit 1
}
ok() { passed=$((passed + 1)); }

cli_tmpdir() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/lf_cli_$1.XXXXXX") || fail "mktemp"
    trap 'rm -rf "$tmp"' EXIT
    cd "$tmp" || fail "cd $tmp"
}
