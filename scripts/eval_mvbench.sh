#!/usr/bin/env bash
# MVBench on a real checkpoint (e.g. Qwen2.5-VL-7B-Instruct); see eval/mvbench.yaml and specs/benchmarks.md.
# Edit the variables below (or set them in the environment); extra arguments go to `mmrl eval mvbench`, e.g.
#   PROTOCOL=lmms-eval scripts/eval_mvbench.sh --tasks action_antonym,object_shuffle --limit 20
# A rerun with the same OUT resumes (ids already in OUT/predictions.jsonl are skipped).
set -euo pipefail

MODEL=${MODEL:-checkpoints/Qwen2.5-VL-7B-Instruct}  # a local checkpoint folder (no hub downloads at run time)
DATA_ROOT=${DATA_ROOT:-data/MVBench}               # json/<task>.json + video/<prefix>/... (or test.json)
PROTOCOL=${PROTOCOL:-original}                     # original (Ask-Anything) | lmms-eval
OUT=${OUT:-runs/eval_mvbench$([ "$PROTOCOL" = original ] || echo _lmms)}
NFRAMES=${NFRAMES:-16}                             # segments per item (notebook/InternVL 16; VLMEvalKit 8 or 64)
MAX_PIXELS=${MAX_PIXELS:-$((224 * 224))}           # per frame (the notebook resizes to 224)
BATCH=${BATCH:-8}                                  # prompts per generate call
MMRL=${MMRL:-mmrl}                                 # e.g. MMRL=".venv/bin/python -m mmrl.cli"

$MMRL eval mvbench --model "$MODEL" --data-root "$DATA_ROOT" --protocol "$PROTOCOL" --out "$OUT" \
  --num-segments "$NFRAMES" --max-pixels "$MAX_PIXELS" --batch "$BATCH" "$@"
