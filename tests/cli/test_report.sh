#!/usr/bin/env bash
# The run report and the dashboard's server from the command line, on real
# tiny training runs (no browser: tests/cli/test_dashboard_browser.sh opens
# them in Chromium):
#   - a run of 20 steps, then --resume to 30 with a learning rate that makes
#     the loss NaN and monitor.alerts.nan.action=skip_step: the report the
#     trainer writes at the end shows the evaluations, the resume and every
#     NaN alert and skipped step as markers, in numbers the log implies;
#   - `llmforge report RUN --svg DIR`: the same, and each chart as an SVG;
#   - a corrupt line and a torn last line: the readable part, exit 0, a
#     warning naming each line on stderr and in the report;
#   - `--compare`: two runs overlaid, the differing key listed;
#   - the model registry's checkpoint ids and tags in the report;
#   - monitor.report=false writes none; a report that cannot be written is a
#     warning and the run still succeeds;
#   - the dashboard on a port that is taken moves to a free one, says so,
#     serves / and /api/run with the run's records, and training succeeds;
#   - bad usage exits 2, a missing run 1, with a message; nothing crashes.
#   bash test_report.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_report.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SHARED=${3:?shared dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SHARED" in /*) ;; *) SHARED="$PWD/$SHARED" ;; esac
. "$(dirname "$0")/cli_lib.sh"
cli_tmpdir report
PY=$(command -v python3 || true)
[ -n "$PY" ] || echo "note: python3 not found; the dashboard's port fallback and the JSON are not checked"

# run_status WANT NAME NEEDLE... -- COMMAND...: exit status WANT, no crash,
# every NEEDLE (fixed string) on stderr; stdout in out.txt, stderr in err.txt.
run_status() {
    local want=$1 name=$2
    shift 2
    local needles=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        needles+=("$1")
        shift
    done
    shift
    "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"
    local rc=$?
    [ "$rc" -eq "$want" ] || fail "$name: exit status $rc, expected $want; stdout: $(cat "$tmp/out.txt"); stderr: $(cat "$tmp/err.txt")"
    ok
    if grep -qE 'Segmentation|AddressSanitizer|LeakSanitizer|runtime error:|core dumped' "$tmp/out.txt" "$tmp/err.txt"; then
        fail "$name: crash or sanitizer report: $(cat "$tmp/err.txt")"
    fi
    local n
    for n in "${needles[@]}"; do
        grep -qF -- "$n" "$tmp/err.txt" || fail "$name: stderr lacks '$n'; stderr: $(cat "$tmp/err.txt")"
        ok
    done
}
has() { grep -qF -- "$2" "$1" || fail "$1 lacks '$2'"; ok; }
lacks() { ! grep -qF -- "$2" "$1" || fail "$1 has '$2'"; ok; }
# the value of attribute $3 of chart $2's <svg> in file $1
chart_attr() { grep -o "data-chart=\"$2\"[^>]*" "$1" | head -1 | grep -o " $3=\"[0-9]*\"" | grep -o '[0-9]*'; }

# ------------------------------------------------------------ data
corpus="$SHARED/data/tinyshakespeare.txt"
if [ -f "$corpus" ]; then
    head -c 30000 "$corpus" >corpus.txt
else
    for i in $(seq 1 400); do echo "First Citizen: we are accounted poor citizens, the patricians good."; done >corpus.txt
fi
"$LF" prepare --char corpus.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
ok
export LLMFORGE_REGISTRY="$tmp/registry.db"
T=(train --data.dataset=data --model.n_layer=1 --model.n_head=2 --model.n_embd=32 --model.block_size=32
   --train_micro_batch_size_per_gpu=4 --eval.interval=10 --eval.iters=2 --checkpoint.interval=10
   --checkpoint.keep_last=2 --scheduler.warmup_iters=2 --threads=2)

# ------------------------------------------------------------ a run, a resume with NaN skips
run_status 0 "train" "report: run/report.html" -- "$LF" "${T[@]}" --out_dir=run --train_iters=20
[ -s run/report.html ] || fail "the trainer wrote no report.html"
ok
has run/report.html 'class="badge ok"'
[ "$(chart_attr run/report.html loss data-markers-checkpoint)" = 2 ] || fail "first run: checkpoint markers"
ok
run_status 0 "resume to NaN" "alert nan (skip_step)" "report: run/report.html" -- "$LF" "${T[@]}" --out_dir=run \
    --train_iters=30 --resume --optimizer.params.lr=1e8 --scheduler.type=constant --gradient_clipping=0 \
    --monitor.alerts.nan.action=skip_step
alerts=$(grep -c '"type":"alert"' run/log.jsonl)
skips=$(grep -c '"type":"skipped_step"' run/log.jsonl)
[ "$alerts" -ge 3 ] && [ "$skips" -eq "$alerts" ] || fail "expected several NaN alerts, each a skipped step: $alerts alerts, $skips skips"
ok
R=run/report.html
[ "$(chart_attr $R loss data-markers-alert)" = "$alerts" ] || fail "alert markers: $(chart_attr $R loss data-markers-alert), log has $alerts"
ok
[ "$(chart_attr $R loss data-markers-skip)" = "$skips" ] || fail "skip markers $(chart_attr $R loss data-markers-skip), log has $skips"
ok
[ "$(chart_attr $R loss data-markers-resume)" = 1 ] || fail "resume markers"
ok
[ "$(chart_attr $R loss data-markers-checkpoint)" = 3 ] || fail "checkpoint markers (10, 20, 30)"
ok
# 20 finite train losses before the lr change + 1 after it at most; 3 evaluations (the NaN one draws no point)
evals=$(grep -c '"type":"eval"' run/log.jsonl)
[ "$evals" = 3 ] || fail "$evals evaluations"
ok
[ "$(chart_attr $R lr data-points)" = 30 ] || fail "lr points: $(chart_attr $R lr data-points)"
ok
has $R "Evaluations (3)"
has $R "Alerts, skipped steps and resumes ($alerts, $skips, 1)"
has $R "non-finite loss"
has $R "removed (rotation)" # keep_last 2: step 10 went
has $R 'data-best="1"><td>★</td><td>step_00000020</td>' # the best val loss was before the NaN
has $R "<th>registry</th>"
# self-contained
lacks $R "http://"
lacks $R "https://"
lacks $R "<script"

# ------------------------------------------------------------ llmforge report
run_status 0 "report --svg" -- "$LF" report run --svg svg --out again.html
grep -qE '^report: again.html \([0-9]+ records, [0-9]+ charts with data, each also as an SVG in svg\)$' out.txt ||
    fail "report output: $(cat out.txt)"
ok
for c in loss eval lr grad_norm loss_scale throughput mfu step_time memory; do
    head -c 5 "svg/$c.svg" | grep -q '<?xml' || fail "svg/$c.svg"
    ok
done
[ "$(chart_attr again.html loss data-markers-alert)" = "$alerts" ] || fail "the CLI's report differs from the trainer's"
ok
# the registry: ids, and a tag put on a checkpoint
run_status 0 "tag" -- "$LF" models tag run/ckpt/step_00000020 prod
run_status 0 "report with tags" -- "$LF" report run --out tagged.html
has tagged.html "<td>prod</td>"
run_status 0 "report --no-registry" -- "$LF" report run --out plain.html --no-registry
lacks plain.html "<th>registry</th>"

# ------------------------------------------------------------ a damaged log
cp -r run bad
sed -i '5s/.*/{"type":"train","step":3,"loss":1.5,"lr" corrupt/' bad/log.jsonl # line 5: not JSON
printf '{"type":"train","step":31,"loss":1.0,"lr"' >>bad/log.jsonl          # a torn last line
n=$(wc -l <bad/log.jsonl)
run_status 0 "damaged log" "log.jsonl:5: not a JSON object" "log.jsonl:$((n + 1)): the last line is cut short" -- \
    "$LF" report bad --no-registry
grep -q "2 warnings, the first: log.jsonl:5:" out.txt || fail "the summary line: $(cat out.txt)"
ok
has bad/report.html "Warnings (2)"
has bad/report.html "log.jsonl:5: not a JSON object"

# ------------------------------------------------------------ --compare
run_status 0 "second run" -- "$LF" "${T[@]}" --out_dir=run2 --train_iters=20 --optimizer.params.lr=3e-3
run_status 0 "compare" -- "$LF" report run run2 --compare --out cmp.html --svg cmp
has cmp.html "<th>optimizer.params.lr</th>"
has cmp.html "<code>0.003</code>"
[ "$(chart_attr cmp.html loss data-points)" -ge 40 ] || fail "compare: loss points $(chart_attr cmp.html loss data-points)"
ok
[ -s cmp/val_loss.svg ] || fail "compare --svg"
ok

# ------------------------------------------------------------ monitor.report
run_status 0 "no report" -- "$LF" "${T[@]}" --out_dir=quiet --train_iters=5 --monitor.report=false
[ ! -e quiet/report.html ] || fail "monitor.report=false wrote a report"
ok
mkdir -p blocked/report.html # a directory where the report goes: the rename fails
run_status 0 "report cannot be written" "the run itself is unaffected" -- "$LF" "${T[@]}" --out_dir=blocked --train_iters=5
grep -q '"status":"ok"' blocked/log.jsonl || fail "the run did not end ok"
ok

# ------------------------------------------------------------ usage and errors
run_status 2 "no args" "a run directory is required" -- "$LF" report
run_status 2 "two without --compare" "add --compare" -- "$LF" report run run2
run_status 2 "unknown option" "unknown option '--bogus'" -- "$LF" report run --bogus
run_status 2 "registry twice" "exclude each other" -- "$LF" report run --registry x --no-registry
run_status 2 "--out without a value" -- "$LF" report run --out
run_status 1 "missing run" "run directory 'nope' does not exist" -- "$LF" report nope
run_status 1 "no log" "log.jsonl" -- "$LF" report data
run_status 1 "unwritable out" "cannot write" -- "$LF" report run --out /nonexistent/dir/r.html --no-registry
run_status 0 "help" -- "$LF" report --help
grep -q "usage: llmforge report RUN_DIR" out.txt || fail "help text"
ok
run_status 1 "dashboard port range" "key 'monitor.dashboard.port' on the command line: 70000 is out of range" -- "$LF" "${T[@]}" --out_dir=x --monitor.dashboard.port=70000

# ------------------------------------------------------------ the dashboard on a taken port
if [ -n "$PY" ]; then
    # hold a port, train with the dashboard on it: it moves, says where, serves the run
    "$PY" - "$LF" "$tmp" <<'EOF' >dash.log 2>&1 || fail "dashboard fallback: $(cat dash.log)"
import json, re, socket, subprocess, sys, time, urllib.request
lf, tmp = sys.argv[1], sys.argv[2]
busy = socket.socket()
busy.bind(("127.0.0.1", 0))
busy.listen(1)
port = busy.getsockname()[1]
args = [lf, "train", "--data.dataset=data", "--model.n_layer=1", "--model.n_head=2", "--model.n_embd=32",
        "--model.block_size=32", "--train_micro_batch_size_per_gpu=4", "--eval.interval=0", "--eval.iters=1",
        "--checkpoint.interval=0", "--train_iters=400000", "--out_dir=dash", "--threads=2",
        "--monitor.dashboard.port=%d" % port, "--registry.enabled=false"]
log = open(tmp + "/dash_train.log", "w")
p = subprocess.Popen(args, cwd=tmp, stdout=subprocess.DEVNULL, stderr=log)
try:
    err, url = "", None
    deadline = time.time() + 60
    while time.time() < deadline and url is None and p.poll() is None:
        err = open(tmp + "/dash_train.log").read()
        m = re.search(r"dashboard: (http://127\.0\.0\.1:(\d+)/)", err)
        if m:
            url, got = m.group(1), int(m.group(2))
        else:
            time.sleep(0.1)
    assert url, "no dashboard URL logged: " + err
    assert ("port %d is taken; serving on port %d instead" % (port, got)) in err, err
    assert got != port
    page = urllib.request.urlopen(url, timeout=10).read().decode()
    assert 'id="lf-schema"' in page
    for _ in range(100):  # wait for some steps
        api = json.load(urllib.request.urlopen(url + "api/run?since=-1", timeout=10))
        if api["header"]["step"] >= 20:
            break
        time.sleep(0.1)
    types = {r["type"] for r in api["records"]}
    assert {"start", "run_info", "train"} <= types, types
    assert api["header"]["num_params"] > 0 and api["header"]["world_size"] == 1, api["header"]
    print("dashboard moved from port %d to %d and served %d records" % (port, got, len(api["records"])))
finally:
    p.kill()
    p.wait()
EOF
    grep -q "dashboard moved from port" dash.log || fail "dashboard fallback: $(cat dash.log)"
    ok
fi

echo "$passed passed"
