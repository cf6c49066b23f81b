#!/usr/bin/env bash
# The CLI and the "cuda" backend where no GPU answers: LLMFORGE_BACKEND=cuda
# must fail cleanly (non-zero exit below 128, no crash report) with the
# reason on stderr: "no CUDA device" in a build with the CUDA backend
# (LF_CUDA=ON; CUDA_VISIBLE_DEVICES is emptied so that this holds on a
# machine with a GPU too), "this build has no CUDA backend" in one without.
# Which build this is comes from `llmforge --version` ("backends: ...").
# Also the global --device option: a bad value is a usage error (exit 2)
# naming it, before or after the command; and --backend / the config key
# `backend` (a bad name, cuda where there is none, the name over the
# environment variable, plan's device/host split).
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

# --backend NAME (global, and the config key `backend` for train/plan): a bad name is a usage
# error naming it; cuda without a GPU (or without the CUDA backend) fails as above; a name
# given wins over LLMFORGE_BACKEND
expect_error "--backend unknown" 2 "--backend tpu" -- "$LF" --backend tpu "${BENCH[@]}"
expect_error "--backend without a value" 2 "--backend needs a value" -- "$LF" bench --backend
if [ "$why" = "no CUDA device" ]; then
    expect_error "--backend cuda bench" 1 "$why" -- "$LF" --backend cuda "${BENCH[@]}"
    # plan splits device and host memory and says the device part was not checked
    "$LF" plan --preset shakespeare-char-cpu --model.vocab_size=65 --backend=cuda >"$tmp/out.txt" 2>"$tmp/err.txt" ||
        fail "plan --backend=cuda without a GPU failed: $(cat "$tmp/err.txt")"
    grep -q "device memory not checked: .*no CUDA device" "$tmp/out.txt" || fail "plan: $(cat "$tmp/out.txt")"
    grep -q "activations (recompute none).*device$" "$tmp/out.txt" || fail "plan: no device items: $(cat "$tmp/out.txt")"
    grep -q "checkpoint staging (host copies).*host$" "$tmp/out.txt" || fail "plan: no host items: $(cat "$tmp/out.txt")"
    ok
else
    expect_error "--backend cuda" 2 "$why" -- "$LF" --backend cuda "${BENCH[@]}"
    # (a config file with --preset still needs its data.dataset; plan only opens it for the vocabulary)
    echo '{"backend": "cuda", "data": {"dataset": "none"}}' >"$tmp/cuda.json"
    expect_error "plan, backend cuda in the config" 2 "key 'backend' in '$tmp/cuda.json'" -- \
        "$LF" plan "$tmp/cuda.json" --preset shakespeare-char-cpu --model.vocab_size=65
fi
echo '{"backend": "gpu"}' >"$tmp/gpu.json"
expect_error "plan, an unknown backend in the config" 2 "not one of" -- \
    "$LF" plan "$tmp/gpu.json" --preset shakespeare-char-cpu --model.vocab_size=65
env LLMFORGE_BACKEND=cuda "$LF" --backend cpu "${BENCH[@]}" >"$tmp/out.txt" 2>"$tmp/err.txt" ||
    fail "--backend cpu did not win over LLMFORGE_BACKEND=cuda: $(cat "$tmp/err.txt")"
ok
"$LF" plan --preset shakespeare-char-cpu --model.vocab_size=65 --backend=cpu --json >"$tmp/out.txt" 2>"$tmp/err.txt" ||
    fail "plan --backend=cpu: $(cat "$tmp/err.txt")"
grep -q '"backend":"cpu","device":"","device_bytes":0' "$tmp/out.txt" || fail "plan --json on cpu: $(cat "$tmp/out.txt")"
ok

# the cpu backend is untouched by all this
"$LF" "${BENCH[@]}" >"$tmp/out.txt" 2>"$tmp/err.txt" || fail "bench on cpu failed: $(cat "$tmp/err.txt")"
ok

echo "$passed passed, 0 failed"
