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

# hf_llama_check PYTHON SRC IDS TOKENS NAME...: tools/check_hf_llama.py on run_NAME/ckpt for each
# NAME, comparing with lf_NAME.json (llmforge's `sample --json` of the same ids) and writing
# hf_NAME.json, check_NAME.log and check_NAME.rc, all in one interpreter (importing torch and
# transformers takes ~12 s a time on a loaded 2-core machine, the check itself under a second).
# Output in check.log; exit status 3 when torch or transformers cannot be imported.
hf_llama_check() {
    local py=$1 src=$2 ids=$3 tokens=$4
    shift 4
    "$py" - "$src/tools/check_hf_llama.py" "$ids" "$tokens" "$@" >check.log 2>&1 <<'PY'
import contextlib, runpy, sys
try:
    import torch, transformers  # noqa: F401 (the tool imports them again, from the cache)
except ImportError as e:
    print(e)
    sys.exit(3)
tool, ids, tokens, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
for name in names:
    sys.argv = [tool, f"run_{name}/ckpt", "--ids", ids, "--tokens", tokens, "--compare", f"lf_{name}.json",
                "--out", f"hf_{name}.json"]
    with open(f"check_{name}.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            runpy.run_path(tool, run_name="__main__")
            rc = 0
        except SystemExit as e:  # the tool ends with sys.exit(main())
            rc = e.code if isinstance(e.code, int) else 1
    with open(f"check_{name}.rc", "w") as f:
        f.write(f"{rc}\n")
PY
}
