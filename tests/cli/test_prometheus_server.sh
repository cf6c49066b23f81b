#!/usr/bin/env bash
# The Prometheus endpoint against a real Prometheus server.
#   bash test_prometheus_server.sh LLMFORGE SOURCE_DIR SHARED_DIR
#
# Checks the files under deploy/ (promtool check rules / test rules / check
# config, the Grafana dashboard parses as JSON), then starts a short training
# run with --monitor.prometheus.port on a free loopback port and a real
# `prometheus` server scraping it every second (its own config, TSDB and
# listen port in a temporary directory), and checks: the page passes
# `promtool check metrics` with no lint complaint; Prometheus stores
# llmforge_loss with the run's own job and rank labels (honor_labels); the
# alert rules load and evaluate; every PromQL expression of the dashboard
# evaluates. Format reference for the page: the Prometheus text exposition
# format 0.0.4.
#
# Without `prometheus` (or promtool, or curl) the test prints a skip line and
# passes. Only 127.0.0.1 is used; every wait is bounded in time; the trap
# stops every process the test started.
set -u

LF=${1:?usage: test_prometheus_server.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
SHARED=${3:?shared dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
case "$SHARED" in /*) ;; *) SHARED="$PWD/$SHARED" ;; esac
CFG="$SRC/configs/shakespeare_char_cpu.json"
DEPLOY="$SRC/deploy"

for tool in prometheus promtool curl; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "skip: $tool is not installed; the Prometheus server test does not run"
        exit 0
    fi
done
PY=$(command -v python3 || true)
[ -n "$PY" ] || echo "note: python3 not found; the dashboard JSON and its queries are not checked"

passed=0
fail() {
    echo "FAIL: $*" >&2
    echo "$passed passed, 1 failed"
    exit 1
}
ok() { passed=$((passed + 1)); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lf_prom_server.XXXXXX") || fail "mktemp"
train_pid=""
prom_pid=""
# Stop a process we started: TERM, up to 10 s, then KILL.
stop() {
    local pid=$1 i
    [ -n "$pid" ] || return 0
    kill "$pid" 2>/dev/null || return 0
    for i in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}
cleanup() {
    stop "$train_pid"
    stop "$prom_pid"
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# A loopback port nothing listens on (and, with python3, that the kernel
# handed out as free a moment ago).
free_port() {
    local p i
    if [ -n "$PY" ]; then
        "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' &&
            return 0
    fi
    for i in $(seq 1 50); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# GET a URL into a file; 0 if the server answered 200.
get() { curl -s -f --max-time 5 -o "$2" "$1"; }

# Poll `cond` (a command) every 0.5 s for at most $1 seconds; 1 on timeout.
wait_for() {
    local secs=$1
    shift
    local deadline=$((SECONDS + secs))
    while [ "$SECONDS" -lt "$deadline" ]; do
        "$@" && return 0
        sleep 0.5
    done
    return 1
}

# ------------------------------------------------------------ deploy/ files
promtool check rules "$DEPLOY/prometheus/llmforge-rules.yml" >"$tmp/check_rules.log" 2>&1 ||
    fail "promtool check rules: $(cat "$tmp/check_rules.log")"
ok
promtool test rules "$DEPLOY/prometheus/llmforge-rules.test.yml" >"$tmp/test_rules.log" 2>&1 ||
    fail "promtool test rules: $(cat "$tmp/test_rules.log")"
ok
promtool check config "$DEPLOY/prometheus/prometheus.yml" >"$tmp/check_config.log" 2>&1 ||
    fail "promtool check config: $(cat "$tmp/check_config.log")"
ok
if [ -n "$PY" ]; then
    "$PY" - "$DEPLOY/grafana/llmforge-dashboard.json" >"$tmp/dash.log" 2>&1 <<'EOF' || fail "dashboard: $(cat "$tmp/dash.log")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schemaVersion"] >= 37, "schemaVersion %r" % d["schemaVersion"]
names = {v["name"]: v for v in d["templating"]["list"]}
assert names["datasource"]["type"] == "datasource" and names["datasource"]["query"] == "prometheus"
assert "job" in names and "rank" in names
ids = [p["id"] for p in d["panels"]]
assert len(ids) == len(set(ids)), "duplicate panel ids"
exprs = " ".join(t["expr"] for p in d["panels"] for t in p["targets"])
for m in ["llmforge_loss", "llmforge_lr", "llmforge_tokens_per_second", "llmforge_mfu",
          "llmforge_step_seconds_bucket", "llmforge_memory_bytes", "llmforge_alerts_total"]:
    assert m in exprs, "no panel shows " + m
assert "histogram_quantile" in exprs
EOF
    ok
fi

# ------------------------------------------------------------ dataset
cd "$tmp" || fail "cd $tmp"
corpus="$SHARED/data/tinyshakespeare.txt"
if [ ! -f "$corpus" ]; then
    for i in $(seq 1 700); do
        echo "ROMEO: line $i, what light through yonder window breaks? It is the east."
    done >corpus.txt
    corpus=corpus.txt
fi
"$LF" prepare --char "$corpus" --out "$tmp/data" >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
ok

# ------------------------------------------------------------ prometheus server
port=$(free_port) || fail "no free port for the trainer"
port2=$(free_port) || fail "no free port for prometheus"
while [ "$port2" = "$port" ]; do port2=$(free_port) || fail "no free port for prometheus"; done
cat >prometheus.yml <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $DEPLOY/prometheus/llmforge-rules.yml
scrape_configs:
  - job_name: lf_scrape
    honor_labels: true
    static_configs:
      - targets: ['127.0.0.1:$port']
EOF
promtool check config prometheus.yml >check_tmp_config.log 2>&1 || fail "temporary config: $(cat check_tmp_config.log)"
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
    --web.listen-address="127.0.0.1:$port2" --log.level=warn >prometheus.log 2>&1 &
prom_pid=$!
API="http://127.0.0.1:$port2"
prom_ready() {
    kill -0 "$prom_pid" 2>/dev/null || fail "prometheus exited: $(tail -20 "$tmp/prometheus.log")"
    get "$API/-/ready" "$tmp/ready.txt"
}
wait_for 30 prom_ready || fail "prometheus not ready on 127.0.0.1:$port2 within 30 s: $(tail -20 prometheus.log)"
ok

# ------------------------------------------------------------ training run
"$LF" train "$CFG" --data.dataset="$tmp/data" --out_dir="$tmp/run" --train_iters=400 --eval.interval=0 \
    --monitor.prometheus.port="$port" >train.log 2>&1 &
train_pid=$!
endpoint_up() {
    kill -0 "$train_pid" 2>/dev/null || fail "the training run exited before serving metrics: $(tail -20 "$tmp/train.log")"
    get "http://127.0.0.1:$port/health" "$tmp/health.txt" && [ "$(cat "$tmp/health.txt")" = "ok" ]
}
wait_for 60 endpoint_up || fail "no /health on 127.0.0.1:$port within 60 s: $(tail -20 train.log)"
ok
# At least one step, so the page holds the training gauges.
stepped() { get "http://127.0.0.1:$port/metrics" "$tmp/metrics.txt" && grep -q '^llmforge_loss{' "$tmp/metrics.txt"; }
wait_for 60 stepped || fail "no llmforge_loss on /metrics within 60 s: $(cat metrics.txt 2>/dev/null | head -40)"
ok

# The page as Prometheus' own linter sees it: no complaint at all.
curl -s --max-time 5 "http://127.0.0.1:$port/metrics" >page.txt || fail "GET /metrics"
promtool check metrics <page.txt >lint.log 2>&1 || fail "promtool check metrics: $(cat lint.log)"
[ ! -s lint.log ] || fail "promtool check metrics complains: $(cat lint.log)"
ok
for m in llmforge_step llmforge_lr llmforge_grad_norm llmforge_tokens_per_second llmforge_last_step_timestamp_seconds \
    llmforge_steps_total llmforge_tokens_total llmforge_skipped_steps_total llmforge_alerts_total \
    llmforge_step_seconds_bucket llmforge_step_seconds_sum llmforge_step_seconds_count llmforge_memory_bytes; do
    grep -q "^$m{rank=\"0\",job=\"llmforge\"" page.txt || fail "page has no $m series labelled rank=\"0\",job=\"llmforge\": $(cat page.txt)"
done
grep -q '^# TYPE llmforge_step_seconds histogram$' page.txt || fail "llmforge_step_seconds is not a histogram"
ok

# ------------------------------------------------------------ Prometheus has it
# query URL-encodes with curl; writes the JSON answer to $tmp/q.json.
query() { curl -s -f --max-time 5 -G --data-urlencode "query=$1" -o "$tmp/q.json" "$API/api/v1/query"; }
has_loss() { query 'llmforge_loss' && grep -q '"result":\[{' "$tmp/q.json"; }
wait_for 60 has_loss || fail "Prometheus has no llmforge_loss after 60 s: $(cat q.json 2>/dev/null) $(tail -5 prometheus.log)"
ok
# honor_labels keeps the run's job label; the scrape job is not pasted over it.
grep -q '"job":"llmforge"' q.json || fail "llmforge_loss lacks job=\"llmforge\": $(cat q.json)"
grep -q '"rank":"0"' q.json || fail "llmforge_loss lacks rank=\"0\": $(cat q.json)"
grep -q 'exported_job' q.json && fail "job label was renamed to exported_job: $(cat q.json)"
ok
query 'up{job="lf_scrape"}' && grep -q '"value":\[[0-9.]*,"1"\]' q.json || fail "target not up: $(cat q.json)"
ok
counted() { query 'llmforge_steps_total > 0' && grep -q '"result":\[{' "$tmp/q.json"; }
wait_for 30 counted || fail "llmforge_steps_total never above 0: $(cat q.json)"
ok

# The alert rules are loaded and evaluate without error.
rules_ok() {
    curl -s -f --max-time 5 -o "$tmp/rules.json" "$API/api/v1/rules" || return 1
    grep -q '"health":"err"' "$tmp/rules.json" && fail "a rule fails to evaluate: $(cat "$tmp/rules.json")"
    [ "$(grep -o '"health":"ok"' "$tmp/rules.json" | wc -l)" -eq 5 ]
}
wait_for 30 rules_ok || fail "the 5 alert rules did not all evaluate: $(cat rules.json 2>/dev/null)"
for a in LlmforgeNaNLoss LlmforgeLossSpike LlmforgeStalled LlmforgeThroughputDrop LlmforgeTargetDown; do
    grep -q "\"name\":\"$a\"" rules.json || fail "rule $a not loaded"
done
ok

# Every expression of the dashboard evaluates (variables replaced by what
# Grafana would send for "All" and a short range).
if [ -n "$PY" ]; then
    "$PY" - "$DEPLOY/grafana/llmforge-dashboard.json" >exprs.txt <<'EOF' || fail "cannot read dashboard expressions"
import json, sys
d = json.load(open(sys.argv[1]))
for p in d["panels"]:
    for t in p["targets"]:
        e = t["expr"].replace("$job", ".*").replace("$rank", ".*")
        e = e.replace("$__rate_interval", "1m").replace("$__range", "5m")
        print(e)
EOF
    n=0
    while IFS= read -r e; do
        query "$e" || fail "dashboard query rejected: $e: $(cat q.json 2>/dev/null)"
        grep -q '"status":"success"' q.json || fail "dashboard query failed: $e: $(cat q.json)"
        n=$((n + 1))
    done <exprs.txt
    [ "$n" -ge 10 ] || fail "only $n dashboard queries"
    ok
    has_quantile() {
        query 'histogram_quantile(0.5, sum by (le, job, rank) (rate(llmforge_step_seconds_bucket[1m])))' &&
            grep -q '"result":\[{' "$tmp/q.json"
    }
    wait_for 30 has_quantile || fail "no step-time quantile: $(cat q.json)"
    ok
fi

echo "$passed passed, 0 failed"
