#!/usr/bin/env bash
# MVBench on a real checkpoint (e.g. Qwen2.5-VL-7B-Instruct). The protocol is the YAML: eval/mvbench.yaml
# (original) or eval/mvbench_lmms.yaml (lmms-eval); see docs/benchmarks.md. Print it first with
#   mmrl eval mvbench --protocol lmms-eval --show-protocol
# Edit the variables below (or set them in the environment); extra arguments go to `mmrl eval mvbench`, e.g.
#   PROTOCOL=lmms-eval scripts/eval_mvbench.sh --tasks action_antonym,object_shuffle --limit 20
# NFRAMES / MAX_PIXELS override the YAML only when set. A rerun with the same OUT resumes. DRY_RUN=1 prints the
# command and its resolved protocol without loading anything. mmrl runs from the repository's .venv unless PY/MMRL say.
set -euo pipefail

MODEL=${MODEL:-checkpoints/Qwen2.5-VL-7B-Instruct}  # a local checkpoint folder (no hub downloads at run time)
DATA_ROOT=${DATA_ROOT:-data/MVBench}               # json/<task>.json + video/<prefix>/... (or test.json)
PROTOCOL=${PROTOCOL:-original}                     # original (Ask-Anything) | lmms-eval
OUT=${OUT:-runs/eval_mvbench$([ "$PROTOCOL" = original ] || echo _lmms)}
NFRAMES=${NFRAMES:-}                               # original: get_index segments (YAML 16); lmms-eval: not used
MAX_PIXELS=${MAX_PIXELS:-}                         # per frame (YAML: 224*224 original, 1605632 lmms-eval)
BATCH=${BATCH:-8}                                  # prompts per generate call
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$([ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python)}  # the repo's venv
MMRL=${MMRL:-"$PY -m mmrl"}                        # how mmrl is run (e.g. MMRL=mmrl with the venv activated)

extra=()
if [ -n "$NFRAMES" ]; then extra+=(--num-segments "$NFRAMES"); fi
if [ -n "$MAX_PIXELS" ]; then extra+=(--max-pixels "$MAX_PIXELS"); fi
args=(--model "$MODEL" --data-root "$DATA_ROOT" --protocol "$PROTOCOL" --out "$OUT" --batch "$BATCH"
      ${extra[@]+"${extra[@]}"} "$@")
if [ "${DRY_RUN:-0}" = 1 ]; then  # print the command and its resolved protocol (a real run's flags); load nothing
  echo "# eval: $MMRL eval mvbench ${args[*]}"
  exec $MMRL eval mvbench "${args[@]}" --show-protocol
fi
exec $MMRL eval mvbench "${args[@]}"
