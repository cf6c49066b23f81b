#!/usr/bin/env bash
# Activation recomputation from the CLI: `llmforge bench --recompute` reports
# the plan's activation bytes (none > selective > full) and takes the policy
# from --config; a bad policy is an error naming it, from bench and from a
# training configuration; `train --help` lists the key.
#   bash test_recompute.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_recompute.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac

. "$(dirname "$0")/cli_lib.sh"

cli_tmpdir recompute

BENCH=(bench --preset shakespeare-char-cpu --steps 1 --warmup 0 --threads 2 --peak-gflops 100 --json)

# activation_bytes of one bench run (the JSON's integer)
act_bytes() {
    local out
    out=$("$LF" "${BENCH[@]}" "$@" 2>err.txt) || fail "bench $*: $(cat err.txt)"
    case "$out" in *'"recompute":"'*) ;; *) fail "bench $* --json has no recompute: $out" ;; esac
    printf '%s\n' "$out" | sed -n 's/.*"activation_bytes":\([0-9][0-9]*\).*/\1/p'
}

none=$(act_bytes --recompute none)
sel=$(act_bytes --recompute selective)
full=$(act_bytes --recompute full)
dflt=$(act_bytes)
[ -n "$none" ] && [ -n "$sel" ] && [ -n "$full" ] || fail "bench printed no activation_bytes"
[ "$none" -gt "$sel" ] && [ "$sel" -gt "$full" ] ||
    fail "activation bytes not none > selective > full: $none $sel $full"
[ "$dflt" -eq "$none" ] || fail "bench without --recompute planned $dflt bytes, none plans $none"
ok

# the policy from a configuration, and --recompute over it
cat > cfg.json <<'EOF'
{"model": {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "vocab_size": 65},
 "activation_checkpointing": {"policy": "full", "partition_activations": false}}
EOF
cfgb=$("$LF" bench --config cfg.json --micro-batch 4 --steps 1 --warmup 0 --threads 2 --peak-gflops 100 --json 2>err.txt) ||
    fail "bench --config: $(cat err.txt)"
case "$cfgb" in *'"recompute":"full","activation_bytes":'"$full"[,}]*) ;; *) fail "bench --config did not plan full ($full bytes): $cfgb" ;; esac
over=$(act_bytes --recompute none)
[ "$over" -eq "$none" ] || fail "--recompute none planned $over bytes"
ok

# text output names the policy
"$LF" bench --preset shakespeare-char-cpu --steps 1 --warmup 0 --threads 2 --peak-gflops 100 --recompute selective \
    > text.txt 2>&1 || fail "bench text: $(cat text.txt)"
grep -q "activations: .* MB (recompute selective)" text.txt || fail "bench text lacks the activations line: $(cat text.txt)"
ok

# bad values
"$LF" bench --preset shakespeare-char-cpu --recompute sometimes > out.txt 2> err.txt
rc=$?
[ $rc -eq 2 ] || fail "bench --recompute sometimes: status $rc"
grep -q "sometimes" err.txt || fail "bench --recompute error does not name the value: $(cat err.txt)"
ok

"$LF" train "$SRC/configs/shakespeare_char_cpu.json" --data.dataset=. --activation_checkpointing.policy=half \
    > out.txt 2> err.txt
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "train with policy half: status $rc"
grep -q "activation_checkpointing.policy" err.txt || fail "train error does not name the key: $(cat err.txt)"
ok

"$LF" train --help > help.txt 2>&1
grep -q "activation_checkpointing.policy" help.txt || fail "train --help does not list activation_checkpointing.policy"
ok

echo "$passed passed"
