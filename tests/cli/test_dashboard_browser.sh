#!/usr/bin/env bash
# The live dashboard and the run report in a real headless browser
# (Debian's `chromium`):
#   1. a short run to its end: the trainer writes report.html;
#   2. a long run with the dashboard on a loopback port; while it trains:
#      - the page's declared schema (<script id="lf-schema">) against a real
#        /api/run: every field the page may read exists in the API's answer
#        (header, model, batch, each record type, run_info's hardware and
#        memory plan), except the ones this run cannot produce (named below),
#        and every field the script reads by name is declared;
#      - Chromium loads the page, lets it poll (virtual time), and the dumped
#        DOM shows every chart drew data (data-points > 0), no script error
#        (data-js-errors="0", and no console message at all on stderr);
#        a screenshot;
#   3. the run is killed; `llmforge report` still reports it;
#   4. the first run's report.html opens with the network disabled (a
#      network namespace without interfaces, where unshare can make one;
#      else a dead proxy and a resolver that resolves nothing): every chart
#      has data, the checkpoint markers are there, no console message; a
#      screenshot.
# Screenshots go to $LF_SCREENSHOT_DIR, default test-screenshots/ beside
# the llmforge binary (docs/dashboard.png and docs/report.png are copies).
# Without chromium or python3 it prints SKIPPED and passes (CTest: skipped).
#   bash test_dashboard_browser.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_dashboard_browser.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
SHARED=${3:?shared dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
case "$SHARED" in /*) ;; *) SHARED="$PWD/$SHARED" ;; esac

CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then
    echo "SKIPPED: chromium is not installed (Debian: apt-get install chromium, or scripts/setup.sh --test); the browser test does not run"
    exit 0
fi
PY=$(command -v python3 || true)
if [ -z "$PY" ]; then
    echo "SKIPPED: python3 is not installed (it reads the API and the dumped DOM); the browser test does not run"
    exit 0
fi
SHOTS=${LF_SCREENSHOT_DIR:-$(dirname "$LF")/test-screenshots}
mkdir -p "$SHOTS" || { echo "FAIL: cannot create $SHOTS"; exit 1; }

. "$SRC/tests/cli/cli_lib.sh"
cli_tmpdir browser
train_pid=""
cleanup() {
    if [ -n "$train_pid" ]; then
        kill -9 "$train_pid" 2>/dev/null
        wait "$train_pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Headless Chromium, as root too (no sandbox there), its own profile, no GPU,
# nothing fetched behind our back (no updates, no sync, no field trials).
CH=("$CHROME" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --no-default-browser-check
    --disable-extensions --disable-background-networking --disable-component-update --disable-sync
    --disable-default-apps --metrics-recording-only --user-data-dir="$tmp/profile" --hide-scrollbars
    --enable-logging=stderr --v=0)

# ------------------------------------------------------------ data, a task
corpus="$SHARED/data/tinyshakespeare.txt"
if [ -f "$corpus" ]; then
    head -c 100000 "$corpus" >corpus.txt
else
    for i in $(seq 1 1500); do echo "First Citizen: we are accounted poor citizens, the patricians good."; done >corpus.txt
fi
"$LF" prepare --char corpus.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
ok
cat >mc.jsonl <<'EOF'
{"task": "multiple_choice", "name": "mc"}
{"context": "First Citizen:\nBefore we proceed any further, hear me", "choices": ["speak.", "go.", "the"], "gold": 0}
{"context": "You are all resolved rather to die than to", "choices": ["famish?", "speak", "go"], "gold": 0}
EOF
# every chart has something to draw: fp16 (loss scale), wall_clock_breakdown
# (phases), the dashboard on (a measured peak: MFU), a task (evaluation metrics)
T=(train --data.dataset=data --model.n_layer=2 --model.n_head=2 --model.n_embd=64 --model.block_size=64
   --train_micro_batch_size_per_gpu=8 --eval.iters=2 --eval.tasks=mc.jsonl --wall_clock_breakdown=true
   --fp16.enabled=true --registry.enabled=false --threads=1 --steps_per_print=100000)
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# ------------------------------------------------------------ 1. a short run: its report
"$LF" "${T[@]}" --out_dir=short --train_iters=60 --eval.interval=20 --checkpoint.interval=20 \
    --monitor.dashboard.port="$(free_port)" >short.log 2>&1 || fail "short run: $(cat short.log)"
[ -s short/report.html ] || fail "the short run wrote no report.html: $(cat short.log)"
ok

# ------------------------------------------------------------ 2. a long run with the dashboard
port=$(free_port)
"$LF" "${T[@]}" --out_dir=long --train_iters=1000000 --eval.interval=25 --checkpoint.interval=50 \
    --monitor.dashboard.port="$port" >long.log 2>&1 &
train_pid=$!
url=""
for i in $(seq 1 300); do
    url=$(grep -o 'dashboard: http://127\.0\.0\.1:[0-9]*/' long.log | head -1 | cut -d' ' -f2)
    [ -n "$url" ] && break
    kill -0 "$train_pid" 2>/dev/null || fail "the long run ended: $(cat long.log)"
    sleep 0.1
done
[ -n "$url" ] || fail "no dashboard URL in the log: $(cat long.log)"
ok

# the schema against the API, once the run has evaluated and checkpointed twice
"$PY" - "$url" "$SRC/src/obs/dashboard/dashboard.html" <<'EOF' >schema.log 2>&1 || fail "schema: $(cat schema.log)"
import json, re, sys, time, urllib.request
url, page_src = sys.argv[1], sys.argv[2]
def get(path):
    return urllib.request.urlopen(url + path, timeout=10).read().decode()
deadline = time.time() + 60
while True:
    head = json.loads(get("api/run?since=1000000000"))["header"]
    if head["step"] >= 110:
        break
    assert time.time() < deadline, "the run did not reach step 110 in 60 s: step %s" % head["step"]
    time.sleep(0.2)
page = get("")
assert page == open(page_src).read(), "GET / is not src/obs/dashboard/dashboard.html"
schema = json.loads(re.search(r'<script id="lf-schema" type="application/json">(.*?)</script>', page, re.S).group(1))
records, since, answers = [], -1, []
while True:
    a = json.loads(get("api/run?since=%d" % since))
    answers.append(a)
    records += a["records"]
    since = a["last_step"]
    if not a["more"]:
        break
api, h = answers[-1], answers[-1]["header"]
# what this run cannot produce: one rank (no comm time), bf16 off, never resumed, still running
absent = {"train.time/comm_ms", "hardware.bf16_kernel", "records.resume", "records.end"}
maybe = {"records.alert", "records.skipped_step"}  # loss spikes and fp16 overflows happen or not
missing = []
for k in schema["api"]:
    if k not in api: missing.append("api." + k)
for k in schema["header"]:
    if k not in h: missing.append("header." + k)
for group in ("model", "batch"):
    for k in schema[group]:
        if k not in h[group]: missing.append(group + "." + k)
by_type = {}
for r in records:
    by_type.setdefault(r["type"], []).append(r)
for t, fields in schema["records"].items():
    if t not in by_type:
        if "records." + t not in absent | maybe: missing.append("records." + t)
        continue
    for f in fields:
        if "%s.%s" % (t, f) in absent: continue
        if f == "eval/*":
            ok = any(k.startswith("eval/") for r in by_type[t] for k in r)
        else:
            ok = any(f in r for r in by_type[t])
        if not ok: missing.append("%s.%s" % (t, f))
info = by_type["run_info"][-1]
for group in ("hardware", "memory_plan"):
    for k in schema[group]:
        if "%s.%s" % (group, k) not in absent and k not in info[group]: missing.append(group + "." + k)
for c in schema["conditional"]:
    assert c.split(".")[0] in ("train", "eval", "records", "hardware") , "conditional '%s' names no group" % c
assert not missing, "declared in the page but not in a real /api/run: %s" % missing
# fields absent here must be absent for the reason the page gives
assert h["world_size"] == 1 and not any("time/comm_ms" in r for r in by_type["train"])
# the other way: every field the script reads by name is declared
script = page[page.index('"use strict";'):]
decl = {t: set(f) for t, f in schema["records"].items()}
groups = {g: set(schema[g]) for g in ("header", "model", "batch", "hardware", "memory_plan", "api")}
used = re.findall(r'\bhv\([^,]+,\s*"(\w+)",\s*"([^"]+)"\)', script)
assert len(used) > 20, used
for g, k in used:
    assert k in groups[g], "the script reads %s.%s, which lf-schema does not declare" % (g, k)
for t, k in re.findall(r'type: "(\w+)", key: "([^"]+)"', script):  # the charts' series
    assert k in decl[t], "a chart reads %s.%s, which lf-schema does not declare" % (t, k)
lits = re.findall(r'\bfv\(r, "([^"]+)"\)', script)
assert len(lits) > 10, lits
all_fields = set().union(*decl.values())
for k in lits:
    assert k in all_fields, "the script reads %s, which no record type declares" % k
print("schema: %d records of %d types in %d answers; %d header reads, %d record reads checked" %
      (len(records), len(by_type), len(answers), len(used), len(lits)))
EOF
ok

# the page in Chromium: it polls, draws, and raises nothing
"${CH[@]}" --virtual-time-budget=15000 --dump-dom "$url" >dash_dom.html 2>dash_console.log ||
    fail "chromium --dump-dom: $(tail -5 dash_console.log)"
ok
check_dom() { # FILE WHAT [KEY=MIN...]: every chart drew data; no script error
    "$PY" - "$@" <<'EOF'
import re, sys
path, what = sys.argv[1], sys.argv[2]
dom = open(path).read()
charts = ["loss", "eval", "lr", "grad_norm", "loss_scale", "throughput", "mfu", "step_time", "memory"]
for c in charts:
    m = re.search(r'<svg[^>]*data-chart="%s"[^>]*>' % c, dom)
    assert m, "%s: no chart %s" % (what, c)
    pts = int(re.search(r'data-points="(\d+)"', m.group(0)).group(1))
    assert pts > 0, "%s: chart %s drew no data" % (what, c)
for kv in sys.argv[3:]:
    key, low = kv.split("=")
    m = re.search(r'%s="(\d+)"' % key, dom)
    assert m and int(m.group(1)) >= int(low), "%s: %s is %s, expected >= %s" % (what, key, m and m.group(1), low)
m = re.search(r'<body[^>]*>', dom).group(0)
errs = re.search(r'data-js-errors="(\d+)"', m)
assert errs is None or errs.group(1) == "0", "%s: script errors: %s" % (what, re.search(r'<pre id="lf-errors">(.*?)</pre>', dom, re.S).group(1))
print("%s: every chart drew data" % what)
EOF
}
check_dom dash_dom.html dashboard data-polls=1 data-records=100 data-markers-checkpoint=2 >dom.log 2>&1 ||
    fail "dashboard DOM: $(cat dom.log)"
ok
if grep -q "CONSOLE" dash_console.log; then fail "the dashboard logged to the console: $(grep CONSOLE dash_console.log)"; fi
ok
"${CH[@]}" --virtual-time-budget=15000 --window-size=1280,1500 --screenshot="$SHOTS/dashboard.png" "$url" \
    >/dev/null 2>shot.log || fail "chromium --screenshot: $(tail -5 shot.log)"
[ "$(head -c 4 "$SHOTS/dashboard.png" | od -An -tx1 | tr -d ' ')" = 89504e47 ] || fail "dashboard.png is not a PNG"
[ "$(wc -c <"$SHOTS/dashboard.png")" -gt 50000 ] || fail "dashboard.png is nearly empty"
ok

# ------------------------------------------------------------ 3. killed mid-run: still reported
kill -9 "$train_pid"
wait "$train_pid" 2>/dev/null
train_pid=""
"$LF" report long --out long.html --no-registry >report_long.log 2>&1 || fail "report of the killed run: $(cat report_long.log)"
grep -q '^report: long.html' report_long.log || fail "report output: $(cat report_long.log)"
ok

# ------------------------------------------------------------ 4. the report, with the network disabled
NET=()
if unshare -n true 2>/dev/null; then
    NET=(unshare -n) # a network namespace of its own: not even loopback is up
    if unshare -n "$PY" -c 'import socket; socket.create_connection(("127.0.0.1", '"$port"'), timeout=2)' 2>/dev/null; then
        fail "unshare -n did not cut the network off"
    fi
    ok
else
    echo "note: cannot unshare the network here; the report opens behind a dead proxy and a resolver that resolves nothing"
fi
offline=(--proxy-server=http://127.0.0.1:9 --proxy-bypass-list='<-loopback>' --host-resolver-rules='MAP * ~NOTFOUND')
"${NET[@]}" "$CHROME" --version >/dev/null 2>&1 || NET=()
"${NET[@]}" "${CH[@]}" "${offline[@]}" --dump-dom "file://$tmp/short/report.html" >report_dom.html 2>report_console.log ||
    fail "chromium on the report: $(tail -5 report_console.log)"
ok
check_dom report_dom.html report data-markers-checkpoint=3 >dom.log 2>&1 || fail "report DOM: $(cat dom.log)"
ok
if grep -q "CONSOLE" report_console.log; then fail "the report logged to the console: $(grep CONSOLE report_console.log)"; fi
ok
"${NET[@]}" "${CH[@]}" "${offline[@]}" --window-size=1280,1800 --screenshot="$SHOTS/report.png" "file://$tmp/short/report.html" \
    >/dev/null 2>shot.log || fail "chromium --screenshot on the report: $(tail -5 shot.log)"
[ "$(wc -c <"$SHOTS/report.png")" -gt 50000 ] || fail "report.png is nearly empty"
ok
cp short/report.html "$SHOTS/report.html" 2>/dev/null
echo "screenshots: $SHOTS/dashboard.png, $SHOTS/report.png"
echo "$passed passed"
