#!/usr/bin/env bash
# The default thread count through the CLI (lf_cpu_threads_choose): the run
# header's `threads:` line says the count and what decided it.
#   bash threads.sh LLMFORGE SOURCE_DIR SHARED_DIR affinity|cgroup
# affinity: under `taskset -c CPU` bench and train run 1 thread "from
# affinity" (text and bench --json); --threads and OMP_NUM_THREADS still win
# over the mask.
# cgroup (root, a writable cgroup hierarchy with the cpu controller): a
# child cgroup of this process's own with a quota of one CPU (cgroup v2
# cpu.max "100000 100000"; on a host whose cpu controller is on cgroup v1,
# cpu.cfs_quota_us 100000 per 100000 µs); a shell moved into it runs bench
# and train, which say 1 thread "from cgroup cpu.max" (or
# cpu.cfs_quota_us); --threads still wins. The child cgroup is removed on
# every exit (trap). Prints "SKIPPED: why" where no such cgroup can be made:
# not root, no cpu controller, or cgroup v2's "no internal processes" rule
# refusing to enable +cpu below a non-root cgroup that holds processes.
set -u

LF=${1:?usage: threads.sh LLMFORGE SOURCE_DIR SHARED_DIR affinity|cgroup}
SRC=${2:?source dir}
MODE=${4:?mode: affinity or cgroup}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
unset OMP_NUM_THREADS

. "$(dirname "$0")/cli_lib.sh"

cli_tmpdir "threads_$MODE"

bench=("$LF" bench --preset shakespeare-char-cpu --micro-batch 2 --seq 32 --steps 1 --warmup 0)
for i in $(seq 1 200); do echo "to be or not to be, that is the question $i"; done >corpus.txt
"$LF" prepare --char corpus.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
train=("$LF" train "$SRC/configs/shakespeare_char_cpu.json" --data.dataset=data --out_dir=run --train_iters=2
       --eval.interval=0 --checkpoint.interval=0 --n_layer=1 --n_embd=32 --n_head=2 --block_size=16
       --train_micro_batch_size_per_gpu=2)

# expect FILE PATTERN WHAT: FILE's `threads:` line matches the grep -E pattern
expect() {
    local line
    line=$(grep -m1 '^threads: ' "$1")
    echo "$line" | grep -Eq "$2" || fail "$3: the header says '$line', want /$2/ ($(head -c 2000 "$1"))"
    ok
}

online=$(getconf _NPROCESSORS_ONLN)
case "$MODE" in
affinity)
    [ "$online" -ge 2 ] || { echo "SKIPPED: one online CPU: an affinity mask cannot narrow it"; exit 0; }
    cpu=$(taskset -cp $$ | sed 's/.*: *//; s/[-,].*//') # the first CPU this shell may use
    taskset -c "$cpu" "${bench[@]}" >b.out 2>&1 || fail "bench under taskset: $(cat b.out)"
    expect b.out "^threads: 1 \(affinity 1 CPU; $online online CPUs\)$" "bench under taskset -c $cpu"
    taskset -c "$cpu" "${bench[@]}" --json >j.out 2>&1 || fail "bench --json under taskset: $(cat j.out)"
    grep -q '"threads":1,"threads_from":"affinity"' j.out || fail "bench --json under taskset: $(cat j.out)"
    ok
    taskset -c "$cpu" "${train[@]}" >t.out 2>&1 || fail "train under taskset: $(cat t.out)"
    expect t.out "^threads: 1 \(affinity 1 CPU; $online online CPUs\)$" "train under taskset -c $cpu"
    grep -q '; 1 threads;' t.out || fail "train's first line does not say 1 thread: $(head -3 t.out)"
    ok
    # the precedence of today: --threads, then OMP_NUM_THREADS, then the machine
    taskset -c "$cpu" "${bench[@]}" --threads 2 >b2.out 2>&1 || fail "bench --threads 2: $(cat b2.out)"
    expect b2.out "^threads: 2 \(--threads; affinity 1 of $online online CPUs\)$" "--threads 2 under taskset"
    OMP_NUM_THREADS=2 taskset -c "$cpu" "${bench[@]}" >b3.out 2>&1 || fail "bench OMP_NUM_THREADS=2: $(cat b3.out)"
    expect b3.out "^threads: 2 \(OMP_NUM_THREADS; affinity 1 of $online online CPUs\)$" "OMP_NUM_THREADS=2 under taskset"
    ;;
cgroup)
    [ "$(id -u)" = 0 ] || { echo "SKIPPED: not root: cannot create a cgroup"; exit 0; }
    child="" parent="" enabled="" ver="" why=""
    cleanup() {
        if [ -n "$child" ] && [ -d "$child" ]; then
            # anything left inside (a killed run) goes back to the parent first
            for p in $(cat "$child/cgroup.procs" 2>/dev/null); do echo "$p" >"$parent/cgroup.procs" 2>/dev/null; done
            rmdir "$child" 2>/dev/null || echo "warning: could not remove cgroup $child" >&2
        fi
        [ -n "$enabled" ] && echo "-cpu" >"$enabled/cgroup.subtree_control" 2>/dev/null
        rm -rf "$tmp"
    }
    trap cleanup EXIT
    # cgroup v2: the unified mount and this process's path in it ("0::/path")
    # (mountinfo: ID PARENT DEV ROOT POINT OPTS [TAGS...] - FSTYPE SOURCE SUPEROPTS)
    v2mnt=$(awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i+1) == "cgroup2") { print $5; exit } break } }' /proc/self/mountinfo)
    v2path=$(sed -n 's/^0:://p' /proc/self/cgroup)
    if [ -n "$v2mnt" ] && [ -n "$v2path" ] && grep -qw cpu "$v2mnt/cgroup.controllers" 2>/dev/null; then
        parent="${v2mnt%/}${v2path%/}"
        if ! grep -qw cpu "$parent/cgroup.subtree_control" 2>/dev/null; then
            if echo "+cpu" >"$parent/cgroup.subtree_control" 2>/dev/null; then
                enabled=$parent
            else
                why="cgroup v2: cannot enable +cpu in $parent/cgroup.subtree_control (a non-root cgroup holding processes: the no-internal-processes rule)"
            fi
        fi
        if [ -z "$why" ]; then
            child="$parent/lf_threads_test.$$"
            if mkdir "$child" 2>/dev/null && echo "100000 100000" >"$child/cpu.max" 2>/dev/null; then
                ver=2
            else
                why="cgroup v2: cannot create $child with cpu.max"
                rmdir "$child" 2>/dev/null
                child=""
            fi
        fi
    else
        why="cgroup v2: no cpu controller in ${v2mnt:-(no cgroup2 mount)}/cgroup.controllers"
    fi
    # cgroup v1: the hierarchy with the cpu controller (hybrid and legacy hosts)
    if [ -z "$ver" ]; then
        v1mnt=$(awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i+1) == "cgroup" && ("," $(i+3) ",") ~ /,cpu,/) { print $5; exit } break } }' /proc/self/mountinfo)
        v1path=$(awk -F: '("," $2 ",") ~ /,cpu,/ { print $3; exit }' /proc/self/cgroup)
        if [ -n "$v1mnt" ] && [ -n "$v1path" ] && [ -w "${v1mnt%/}${v1path%/}" ]; then
            parent="${v1mnt%/}${v1path%/}"
            child="$parent/lf_threads_test.$$"
            if mkdir "$child" 2>/dev/null && echo 100000 >"$child/cpu.cfs_period_us" &&
                echo 100000 >"$child/cpu.cfs_quota_us"; then
                ver=1
            else
                why="$why; cgroup v1: cannot create $child with cpu.cfs_quota_us"
            fi
        else
            why="$why; cgroup v1: no writable hierarchy with the cpu controller"
        fi
    fi
    [ -n "$ver" ] || { echo "SKIPPED: $why"; exit 0; }
    if [ "$ver" = 2 ]; then src="cgroup cpu.max"; else src="cgroup cpu.cfs_quota_us"; fi
    echo "cgroup v$ver: $child"
    # a shell moved into the child runs the commands; this script stays where it is
    incg() { sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$child" "$@"; }
    incg "${bench[@]}" >b.out 2>&1 || fail "bench in $child: $(cat b.out)"
    grep '^threads:' b.out
    if [ "$online" -ge 2 ]; then
        aff=$(taskset -cp $$ | sed 's/.*: *//')
        expect b.out "^threads: 1 \($src 100000/100000; .*online CPUs?\)$" "bench under a one-CPU quota (affinity $aff)"
    else
        expect b.out "^threads: 1 " "bench under a one-CPU quota on a one-CPU machine"
    fi
    incg "${bench[@]}" --json >j.out 2>&1 || fail "bench --json in $child: $(cat j.out)"
    if [ "$online" -ge 2 ]; then
        grep -q "\"threads\":1,\"threads_from\":\"$src\"" j.out || fail "bench --json in $child: $(cat j.out)"
        ok
    fi
    incg "${train[@]}" >t.out 2>&1 || fail "train in $child: $(cat t.out)"
    [ "$online" -ge 2 ] && expect t.out "^threads: 1 \($src 100000/100000; " "train under a one-CPU quota"
    incg "${bench[@]}" --threads 2 >b2.out 2>&1 || fail "bench --threads 2 in $child: $(cat b2.out)"
    expect b2.out "^threads: 2 \(--threads; " "--threads 2 under a one-CPU quota"
    ;;
*) fail "unknown mode '$MODE'" ;;
esac

echo "$passed passed, 0 failed"
