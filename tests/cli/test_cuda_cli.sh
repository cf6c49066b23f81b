#!/usr/bin/env bash
# The CLI and the "cuda" backend where no GPU answers: LLMFORGE_BACKEND=cuda
# must fail cleanly (non-zero exit below 128, no crash report) with the
# reason on stderr: "no CUDA device" in a build with the CUDA backend
# (LF_CUDA=ON; CUDA_VISIBLE_DEVICES is emptied so that this holds on a
# machine with a GPU too), "this build has no CUDA backend" in one without.
# Which build this is comes from `llmforge --version` ("backends: ...").
# Also the global --device option: a bad value is a usage error (exit 2)
# naming it, before or after the command.
#   bash test_cuda_cli.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_cuda_cli.sh LLMFORGE SOURCE_DIR SHARED_DIR}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac

. "$(dirname "$0")/cli_lib.sh"

cli_tmpdir cuda

# expect_error NAME WANT_RC NEEDLE -- COMMAND...  (WANT_RC "any": non-zero)
expect_error() {
    local name=$1 want=$2 needle=$3
    shift 4
    "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"
    local rc=$?
    [ "$rc" -ne 0 ] || fail "$name: exit status 0, expected an error; command: $*"
    [ "$rc" -lt 128 ] || fail "$name: exit status $rc (killed by a signal); stderr: $(cat "$tmp/err.txt")"
    [ "$want" = any ] || [ "$rc" -eq "$want" ] || fail "$name: exit status $rc, expected $want; stderr: $(cat "$tmp/err.txt")"
    ok
    if grep -qE 'Segmentation|AddressSanitizer|LeakSanitizer|runtime error:|core dumped' "$tmp/out.txt" "$tmp/err.txt"; then
        fail "$name: crash or sanitizer report; stderr: $(cat "$tmp/err.txt")"
    fi
    grep -qF -- "$needle" "$tmp/err.txt" || fail "$name: stderr does not say '$needle'; stderr: $(cat "$tmp/err.txt")"
    ok
}

version=$("$LF" --version) || fail "--version failed"
backends=$(printf '%s\n' "$version" | grep '^backends: ') || fail "--version lacks the backends line: $version"
ok
if printf '%s\n' "$backends" | grep -q 'cpu-fenced, cuda, cuda-bf16$'; then
    why="no CUDA device"
else
    why="this build has no CUDA backend (configured with LF_CUDA=OFF or no nvcc)"
fi

BENCH=(bench --preset shakespeare-char-cpu --micro-batch 1 --seq 8 --steps 1 --warmup 0 --peak-gflops 1)
export CUDA_VISIBLE_DEVICES=
expect_error "bench on cuda" 1 "$why" -- env LLMFORGE_BACKEND=cuda "$LF" "${BENCH[@]}"
expect_error "bench on cuda, --device 0" any "$why" -- env LLMFORGE_BACKEND=cuda "$LF" --device 0 "${BENCH[@]}"
expect_error "--device not a number" 2 "--device" -- "$LF" --device x "${BENCH[@]}"
expect_error "--device negative, after the command" 2 "--device" -- "$LF" bench --device=-1 --preset shakespeare-char-cpu
expect_error "--device without a value" 2 "--device needs a value" -- "$LF" bench --device

# the cpu backend is untouched by all this
"$LF" "${BENCH[@]}" >"$tmp/out.txt" 2>"$tmp/err.txt" || fail "bench on cpu failed: $(cat "$tmp/err.txt")"
ok

echo "$passed passed, 0 failed"
