#!/usr/bin/env bash
# GDPO on Qwen2.5-VL-7B-Instruct: ZeRO-3, vLLM colocated (configs/recipes/gdpo_qwen2_5_vl_7b.yaml).
# Needs GPUs: 8 x 80 GB per node (CUDA; vLLM and DeepSpeed installed, docs/install_gpu.md).
# Variables (environment or edit below); extra arguments are dotted config overrides:
#   MODEL_PATH=/ckpt/folder DATA_PATH=data/train.json scripts/train_gdpo_qwen2_5_vl_7b.sh train.steps=100
#   NUM_NODES=2 HOSTFILE=hostfile scripts/train_gdpo_qwen2_5_vl_7b.sh   # MASTER_ADDR: the hostfile's first host unless set
#   DRY_RUN=1 scripts/train_gdpo_qwen2_5_vl_7b.sh                          # resolve, validate, print the plan; load nothing
# Rerunning with the same OUT_DIR resumes from its latest checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL_PATH=${MODEL_PATH:-checkpoints/Qwen2.5-VL-7B-Instruct}  # a local checkpoint folder (no hub downloads)
CONFIG=${CONFIG:-configs/recipes/gdpo_qwen2_5_vl_7b.yaml}
OUT_DIR=${OUT_DIR:-runs/gdpo_qwen2_5_vl_7b}
source scripts/_launch.sh
