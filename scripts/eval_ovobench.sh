#!/usr/bin/env bash
# OVO-Bench (offline protocol) on a real checkpoint (e.g. Qwen2.5-VL-7B-Instruct); see eval/ovobench.yaml.
# Edit the variables below (or set them in the environment); extra arguments go to `mmrl eval ovobench`, e.g.
#   scripts/eval_ovobench.sh --tasks EPM,REC --limit 10
# CHUNKED=1: VIDEO_ROOT holds the released pre-chunked {id}.mp4 / {id}_{i}.mp4; otherwise each prefix
# [0, ceil(realtime)] is cut on the fly from the source videos. A rerun with the same OUT resumes.
# Score result files only: mmrl eval ovobench --score-only results/*.json
set -euo pipefail

MODEL=${MODEL:-checkpoints/Qwen2.5-VL-7B-Instruct}  # a local checkpoint folder (no hub downloads at run time)
ANNO=${ANNO:-data/OVO-Bench/ovo_bench_new.json}
VIDEO_ROOT=${VIDEO_ROOT:-data/OVO-Bench/src_videos}
CHUNKED=${CHUNKED:-0}
OUT=${OUT:-runs/eval_ovobench}
NFRAMES=${NFRAMES:-64}                             # official wrappers: up to 64 uniform frames per prefix
MAX_PIXELS=${MAX_PIXELS:-$((360 * 420))}           # official Qwen2-VL wrapper
BATCH=${BATCH:-8}
MMRL=${MMRL:-mmrl}                                 # e.g. MMRL=".venv/bin/python -m mmrl.cli"

extra=()
if [ "$CHUNKED" = 1 ]; then extra+=(--chunked); fi
$MMRL eval ovobench --model "$MODEL" --anno "$ANNO" --video-root "$VIDEO_ROOT" --out "$OUT" \
  --nframes "$NFRAMES" --max-pixels "$MAX_PIXELS" --batch "$BATCH" ${extra[@]+"${extra[@]}"} "$@"
