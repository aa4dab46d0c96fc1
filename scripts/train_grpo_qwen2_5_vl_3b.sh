#!/usr/bin/env bash
# GRPO on Qwen2.5-VL-3B-Instruct (configs/grpo_qwen2_5_vl_3b.yaml): DeepSpeed ZeRO-2, vLLM colocated.
# Edit the variables below (or set them in the environment); extra arguments are dotted config overrides:
#   NUM_GPUS=8 scripts/train_grpo_qwen2_5_vl_3b.sh train.steps=100
#   NUM_NODES=2 HOSTFILE=hostfile scripts/train_grpo_qwen2_5_vl_3b.sh    # hostfile lines: "node-1 slots=8"
#   DRY_RUN=1 scripts/train_grpo_qwen2_5_vl_3b.sh                         # print the plan and the launch command
# Rerunning with the same OUT_DIR resumes from its latest checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL_PATH=${MODEL_PATH:-checkpoints/Qwen2.5-VL-3B-Instruct}  # a local checkpoint folder (no hub downloads)
DATA_PATH=${DATA_PATH:-data/train.json}                       # annotation file (see mmrl/data/annotations.py)
MEDIA_ROOT=${MEDIA_ROOT:-}                                    # where relative video paths start (default: next to DATA_PATH)
NUM_GPUS=${NUM_GPUS:-8}                                       # per node
NUM_NODES=${NUM_NODES:-1}
HOSTFILE=${HOSTFILE:-}                                        # required when NUM_NODES > 1
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
CONFIG=${CONFIG:-configs/grpo_qwen2_5_vl_3b.yaml}
OUT_DIR=${OUT_DIR:-runs/grpo_qwen2_5_vl_3b}
PY=${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python)}

source scripts/_launch.sh
