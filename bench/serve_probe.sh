#!/usr/bin/env bash
# A hostile-client probe of `llmforge serve` (issue 31's probe, committed): bad requests and
# abandoned connections, 64 `openai` clients for 60 s with the server's RSS sampled, slow-loris
# clients beside a normal one, batch invariance, and the drain trials A/B/C. This script makes
# a tiny checkpoint and runs bench/serve_probe.py, which starts `llmforge serve` itself (one
# fresh server per section, and per drain trial) and prints a summary and one JSON line.
#   bench/serve_probe.sh [PROBE OPTIONS]
# e.g. bench/serve_probe.sh --sections bad,drain --drain-trials 2; `--help` lists the options
# (sections, sizes, durations). Defaults are the issue's sizes; it takes 2-3 minutes on 2 cores.
# Exit status: 0 when every check passed, 1 when one failed (each failure is listed), 2 on a
# usage or set-up error.
# Environment: BUILD (default build); LF_SHARED (default ../shared: data/tinyshakespeare.txt);
# LF_OPENAI_PYTHON (default ~/.cache/llmforge/openai-venv/bin/python, made with pip when
# missing, as tests/cli/test_serve.sh does); FRESH=1 trains the checkpoint again.
#
# The checkpoint (out/bench/serve_probe/run): tests/cli/test_serve.sh's model, a GPT-2 of 2
# layers, 2 heads, 48 channels, block 128, character vocabulary, trained 100 steps on the first
# 60 kB of tinyshakespeare (about 15 s), with test_serve's chat template so that the chat
# endpoint has one. The server runs it with --max-batch 8 --max-queue 64 --threads 2 and an API
# key (out/bench/serve_probe/key.txt), so that "no key" cases have something to refuse.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SHARED=${LF_SHARED:-../shared}
OUT=out/bench/serve_probe
PY=${LF_OPENAI_PYTHON:-$HOME/.cache/llmforge/openai-venv/bin/python}

if [ -f "$BUILD/CMakeCache.txt" ]; then
  cmake --build "$BUILD" -j "$(nproc)" --target llmforge_cli >/dev/null
else
  make -s build BUILD="$BUILD" >/dev/null
fi
LF=$BUILD/llmforge
if ! [ -x "$PY" ] || ! "$PY" -c "import openai" 2>/dev/null; then
  venv=$HOME/.cache/llmforge/openai-venv
  echo "serve_probe.sh: pip install 'openai>=1.0,<4' into $venv"
  python3 -m venv "$venv" && "$venv/bin/pip" install -q "openai>=1.0,<4"
  PY=$venv/bin/python
fi
corpus=$SHARED/data/tinyshakespeare.txt
[ -f "$corpus" ] || { echo "serve_probe.sh: $corpus is missing (LF_SHARED names the shared directory)" >&2; exit 2; }

mkdir -p "$OUT"
if [ "${FRESH:-0}" = 1 ] || ! ls -d "$OUT"/run/ckpt/step_* >/dev/null 2>&1; then
  rm -rf "$OUT/data" "$OUT/run"
  head -c 60000 "$corpus" >"$OUT/corpus.txt"
  "$LF" prepare --char "$OUT/corpus.txt" --out "$OUT/data" >"$OUT/prepare.log" 2>&1 ||
    { cat "$OUT/prepare.log" >&2; exit 2; }
  "$LF" train --data.dataset="$OUT/data" --model.n_layer=2 --model.n_head=2 --model.n_embd=48 \
    --model.block_size=128 --train_micro_batch_size_per_gpu=8 --train_iters=100 --optimizer.params.lr=3e-3 \
    --eval.interval=0 --checkpoint.interval=0 --out_dir="$OUT/run" --threads=2 >"$OUT/train.log" 2>&1 ||
    { tail -20 "$OUT/train.log" >&2; exit 2; }
  step=$(ls -d "$OUT"/run/ckpt/step_* | tail -1)
  cat >"$step/chat_template.json" <<'EOF'
{"format": "llmforge.chat_template.v1",
 "roles": {"system": {"prefix": "", "suffix": "\n"}, "user": {"prefix": "First Citizen:\n", "suffix": "\n\n"},
           "assistant": {"prefix": "Second Citizen:\n", "suffix": "\n\n"}},
 "generation_prompt": "Second Citizen:\n", "stop": ["\n\n"]}
EOF
  echo "serve_probe.sh: trained $step"
fi
[ -f "$OUT/key.txt" ] || echo "probe-key-$RANDOM$RANDOM" >"$OUT/key.txt"
exec "$PY" bench/serve_probe.py --llmforge "$LF" --ckpt "$OUT/run" --key-file "$OUT/key.txt" --out "$OUT" "$@"
