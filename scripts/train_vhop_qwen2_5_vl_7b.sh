#!/usr/bin/env bash
# VHOP-Router's three stages on Qwen2.5-VL-7B-Instruct (configs/recipes/vhop_qwen2_5_vl_7b.yaml over
# configs/vhop_{sft,imitate,rl}.yaml): InfoNCE SFT -> DAgger imitation -> RL, each from the previous stage.
# Needs ONE GPU (80 GB, CUDA): one process, LoRA. The router then serves tools/retrieval_router.yaml.
# Variables (environment or edit below); extra arguments are dotted overrides (every stage):
#   MODEL_PATH=/ckpt/folder TRAIN=data/vhop/queries_train.json EVAL=data/vhop/queries_test.json scripts/train_vhop_qwen2_5_vl_7b.sh
#   DRY_RUN=1 scripts/train_vhop_qwen2_5_vl_7b.sh              # validate and print the three stages; load nothing
# A stage whose OUT_DIR/<stage>/final exists is skipped on a rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL_PATH=${MODEL_PATH:-checkpoints/Qwen2.5-VL-7B-Instruct}  # a local checkpoint folder (no hub downloads)
TRAIN=${TRAIN:-data/vhop/queries_train.json}                 # VHOP query files (mmrl data synth --kind vhop writes them)
EVAL=${EVAL:-data/vhop/queries_test.json}
RECIPE=${RECIPE:-configs/recipes/vhop_qwen2_5_vl_7b.yaml}
OUT_DIR=${OUT_DIR:-runs/vhop_qwen2_5_vl_7b}
PY=${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python)}

prev=""
for stage in sft imitate rl; do
  args=(-m mmrl vhop "$stage" --config "configs/vhop_$stage.yaml" --config "$RECIPE" "model.path=$MODEL_PATH"
        "data.train=$TRAIN" "data.eval=$EVAL" "train.out_dir=$OUT_DIR/$stage")
  [ -n "$prev" ] && args+=("train.init_from=$OUT_DIR/$prev")
  [ "$stage" = rl ] && args+=("rl.ref_from=$OUT_DIR/sft")
  if [ "${DRY_RUN:-0}" = 1 ]; then
    echo "# stage $stage: $PY ${args[*]} $*"
    "$PY" "${args[@]:0:4}" --dry-run "${args[@]:4}" "$@"
  elif [ ! -d "$OUT_DIR/$stage/final" ]; then
    "$PY" "${args[@]}" "$@"
  fi
  prev=$stage
done
