#!/usr/bin/env bash
# The fp32 kernel through the CLI: `bench` and `train` name it (text and
# --json), the default is oneDNN whatever OPENBLAS_CORETYPE says (an
# AVX-512 CPU gets an AVX-512 kernel and no warning, also under
# OPENBLAS_CORETYPE=Prescott), LLMFORGE_FP32_GEMM=openblas selects OpenBLAS
# and, with its generic Prescott kernel on an AVX2/AVX-512 CPU, a warning on
# stderr says so and what to do; an unknown LLMFORGE_FP32_GEMM exits 2
# naming the variable. The CPU ISA: bench and train print `cpu isa:` (and
# --json cpu_isa), LLMFORGE_CPU_ISA=avx2 moves it and oneDNN's sgemm to
# avx2 where the CPU has AVX2, and an unknown level or one above the CPU's
# exits 2 naming the variable and the value.
#   bash test_kernels.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_kernels.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
unset LLMFORGE_FP32_GEMM ONEDNN_MAX_CPU_ISA LLMFORGE_CPU_ISA

. "$(dirname "$0")/cli_lib.sh"

cli_tmpdir kernels

flags=$(grep -m1 '^flags' /proc/cpuinfo)
avx512=0; avx2=0
case " $flags " in *" avx512f "*) case " $flags " in *" avx512bw "*) avx512=1 ;; esac ;; esac
case " $flags " in *" avx2 "*) case " $flags " in *" fma "*) avx2=1 ;; esac ;; esac

bench=("$LF" bench --preset shakespeare-char-cpu --micro-batch 2 --seq 32 --steps 1 --warmup 0 --threads 1)

for coretype in "" Prescott; do
    OPENBLAS_CORETYPE=$coretype "${bench[@]}" --json >json.out 2>json.err || fail "bench --json: $(cat json.err)"
    k=$(sed -n 's/.*"fp32_kernel":"\([^"]*\)".*/\1/p' json.out)
    case "$k" in "oneDNN "*) ;; *) fail "OPENBLAS_CORETYPE='$coretype': default fp32 kernel is '$k', not oneDNN" ;; esac
    if [ "$avx512" = 1 ]; then
        case "$k" in *avx512*) ;; *) fail "AVX-512 CPU but the fp32 kernel is '$k'" ;; esac
    fi
    if [ "$avx2" = 1 ] && grep -q warning json.err; then
        fail "OPENBLAS_CORETYPE='$coretype': the default warned: $(cat json.err)"
    fi
    ok
done

OPENBLAS_CORETYPE=Prescott "${bench[@]}" >text.out 2>&1 || fail "bench: $(cat text.out)"
grep -q '^fp32 matmul: oneDNN ' text.out || fail "bench does not name its fp32 kernel: $(cat text.out)"
ok

OPENBLAS_CORETYPE=Prescott LLMFORGE_FP32_GEMM=openblas "${bench[@]}" >oblas.out 2>oblas.err ||
    fail "bench with openblas: $(cat oblas.err)"
grep -q '^fp32 matmul: OpenBLAS .*Prescott' oblas.out || fail "LLMFORGE_FP32_GEMM=openblas not used: $(cat oblas.out)"
if [ "$avx2" = 1 ]; then
    grep -q '^llmforge: warning: fp32 matmul: OpenBLAS runs its SSE kernel .Prescott.' oblas.err ||
        fail "no warning for OpenBLAS's generic kernel: $(cat oblas.err)"
    grep -q 'LLMFORGE_FP32_GEMM' oblas.err || fail "the warning does not say what to do: $(cat oblas.err)"
fi
ok

LLMFORGE_FP32_GEMM=mkl "${bench[@]}" >bad.out 2>&1
rc=$?
[ "$rc" = 2 ] || fail "LLMFORGE_FP32_GEMM=mkl: exit $rc, want 2"
grep -q "LLMFORGE_FP32_GEMM='mkl'" bad.out || fail "the error does not name the variable: $(cat bad.out)"
ok

# the CPU ISA: named, capped, refused
grep -q '^cpu isa: [a-z0-9_]* (cpuid)$' text.out || fail "bench does not name its cpu isa: $(cat text.out)"
grep -q '"cpu_isa":"[a-z0-9_]*","cpu_isa_source":"cpuid"' json.out || fail "bench --json has no cpu_isa: $(cat json.out)"
if [ "$avx2" = 1 ]; then
    LLMFORGE_CPU_ISA=avx2 "${bench[@]}" >isa.out 2>&1 || fail "LLMFORGE_CPU_ISA=avx2: $(cat isa.out)"
    grep -q '^cpu isa: avx2 (LLMFORGE_CPU_ISA)$' isa.out || fail "LLMFORGE_CPU_ISA=avx2 not used: $(cat isa.out)"
    grep -q '^fp32 matmul: oneDNN .* avx2 ' isa.out || fail "oneDNN not capped at avx2: $(cat isa.out)"
fi
for bad in avx1024 amx; do
    if [ "$bad" = amx ] && grep -qw amx_tile /proc/cpuinfo; then continue; fi
    LLMFORGE_CPU_ISA=$bad "${bench[@]}" >bad.out 2>&1
    rc=$?
    [ "$rc" = 2 ] || fail "LLMFORGE_CPU_ISA=$bad: exit $rc, want 2"
    grep -q "LLMFORGE_CPU_ISA='$bad'" bad.out || fail "the error does not name the variable and value: $(cat bad.out)"
done
ok

# train's header names the kernel too
for i in $(seq 1 200); do echo "to be or not to be, that is the question $i"; done >corpus.txt
"$LF" prepare --char corpus.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
"$LF" train "$SRC/configs/shakespeare_char_cpu.json" --data.dataset=data --out_dir=run --train_iters=2 \
    --eval.interval=0 --checkpoint.interval=0 --n_layer=1 --n_embd=32 --n_head=2 --block_size=16 \
    --train_micro_batch_size_per_gpu=2 >train.log 2>&1 || fail "train: $(cat train.log)"
grep -q '^fp32 matmul: oneDNN ' train.log || fail "train does not name its fp32 kernel: $(cat train.log)"
grep -q '^cpu isa: ' train.log || fail "train does not name its cpu isa: $(cat train.log)"
ok

echo "$passed passed, 0 failed"
