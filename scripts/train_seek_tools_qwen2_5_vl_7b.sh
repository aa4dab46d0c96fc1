#!/usr/bin/env bash
# Video-seek tools with rectified bootstrapping on Qwen2.5-VL-7B-Instruct: mmrl rectify (RL -> rectify -> SFT -> RL) (configs/recipes/seek_tools_qwen2_5_vl_7b.yaml).
# Needs ONE GPU (80 GB, CUDA): one process, HF rollouts, LoRA.
# Variables (environment or edit below); extra arguments are dotted config overrides:
#   MODEL_PATH=/ckpt/folder DATA_PATH=data/train.json scripts/train_seek_tools_qwen2_5_vl_7b.sh train.steps=100
#   DRY_RUN=1 scripts/train_seek_tools_qwen2_5_vl_7b.sh                          # resolve, validate, print the plan; load nothing
# Rerunning with the same OUT_DIR resumes from its latest checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL_PATH=${MODEL_PATH:-checkpoints/Qwen2.5-VL-7B-Instruct}  # a local checkpoint folder (no hub downloads)
CONFIG=${CONFIG:-configs/recipes/seek_tools_qwen2_5_vl_7b.yaml}
OUT_DIR=${OUT_DIR:-runs/seek_tools_qwen2_5_vl_7b}
LAUNCH_MODE=single MMRL_CMD=rectify NUM_GPUS=1
source scripts/_launch.sh
