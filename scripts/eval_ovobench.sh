#!/usr/bin/env bash
# OVO-Bench (offline protocol, the official Qwen2-VL wrapper's settings) on a real checkpoint. The protocol is
# eval/ovobench.yaml (64 frames max, 360*420 px, 128 new tokens); print it with `mmrl eval ovobench --show-protocol`.
# DATA_ROOT holds ovo_bench_new.json and src_videos/ (or chunked_videos/ with CHUNKED=1), as the official repo's data/.
# NFRAMES / MAX_PIXELS override the YAML only when set. A rerun with the same OUT resumes. DRY_RUN=1 prints the
# command and its resolved protocol without loading anything. mmrl runs from the repository's .venv unless PY/MMRL say.
set -euo pipefail

MODEL=${MODEL:-checkpoints/Qwen2.5-VL-7B-Instruct}  # a local checkpoint folder (no hub downloads at run time)
DATA_ROOT=${DATA_ROOT:-data/OVO-Bench}
CHUNKED=${CHUNKED:-0}
OUT=${OUT:-runs/eval_ovobench}
NFRAMES=${NFRAMES:-}                               # YAML: min(64, len - 2)
MAX_PIXELS=${MAX_PIXELS:-}                         # YAML: 360 * 420
BATCH=${BATCH:-8}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$([ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python)}  # the repo's venv
MMRL=${MMRL:-"$PY -m mmrl"}                        # how mmrl is run (e.g. MMRL=mmrl with the venv activated)

extra=()
if [ "$CHUNKED" = 1 ]; then extra+=(--chunked); fi
if [ -n "$NFRAMES" ]; then extra+=(--nframes "$NFRAMES"); fi
if [ -n "$MAX_PIXELS" ]; then extra+=(--max-pixels "$MAX_PIXELS"); fi
args=(--model "$MODEL" --data-root "$DATA_ROOT" --out "$OUT" --batch "$BATCH" ${extra[@]+"${extra[@]}"} "$@")
if [ "${DRY_RUN:-0}" = 1 ]; then  # print the command and its resolved protocol (a real run's flags); load nothing
  echo "# eval: $MMRL eval ovobench ${args[*]}"
  exec $MMRL eval ovobench "${args[@]}" --show-protocol
fi
exec $MMRL eval ovobench "${args[@]}"
