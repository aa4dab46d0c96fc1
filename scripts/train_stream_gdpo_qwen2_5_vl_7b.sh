#!/usr/bin/env bash
# Stream-GDPO on Qwen2.5-VL-7B-Instruct (configs/recipes/stream_gdpo_qwen2_5_vl_7b.yaml): masked SFT on the
# oracle's streams (OUT_DIR/sft), then Stream-GDPO from its final checkpoint (OUT_DIR/rl).
# Needs ONE GPU (80 GB, CUDA): one process, HF rollouts, LoRA.
# Variables (environment or edit below); extra arguments are dotted config overrides (both stages):
#   MODEL_PATH=/ckpt/folder DATA_PATH=data/stream/train.json scripts/train_stream_gdpo_qwen2_5_vl_7b.sh
#   DRY_RUN=1 scripts/train_stream_gdpo_qwen2_5_vl_7b.sh      # both stages' plans; load nothing
# Rerunning with the same OUT_DIR skips a finished SFT stage and resumes the RL stage.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL_PATH=${MODEL_PATH:-checkpoints/Qwen2.5-VL-7B-Instruct}  # a local checkpoint folder (no hub downloads)
DATA_PATH=${DATA_PATH:-data/train.json}
CONFIG=${CONFIG:-configs/recipes/stream_gdpo_qwen2_5_vl_7b.yaml}
RUN_DIR=${OUT_DIR:-runs/stream_gdpo_qwen2_5_vl_7b}
PY=${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python)}

SFT=("$PY" -m mmrl sft --config "$CONFIG" "model.path=$MODEL_PATH" "data.train=$DATA_PATH" "train.out_dir=$RUN_DIR/sft")
if [ "${DRY_RUN:-0}" = 1 ]; then
  echo "# stage 1 (masked SFT): ${SFT[*]} $*"
  "${SFT[@]:0:4}" --dry-run --no-data-check "${SFT[@]:4}" "$@"
elif [ ! -d "$RUN_DIR/sft/final" ]; then
  "${SFT[@]}" --auto-resume "$@"
fi
# stage 2: Stream-GDPO from the SFT checkpoint
MODEL_PATH=$RUN_DIR/sft/final OUT_DIR=$RUN_DIR/rl LAUNCH_MODE=single MMRL_CMD=train NUM_GPUS=1
echo "# stage 2 (Stream-GDPO) from $MODEL_PATH"
source scripts/_launch.sh
