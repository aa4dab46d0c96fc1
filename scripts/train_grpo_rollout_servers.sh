#!/usr/bin/env bash
# GRPO on Qwen2.5-VL-7B-Instruct (configs/recipes/grpo_qwen2_5_vl_7b.yaml) with rollouts on vLLM servers (scripts/rollout_server.sh), DeepSpeed
# on this node's NUM_GPUS. Needs GPUs: the trainer's here, the servers' on ROLLOUT_SERVERS (docs/scale_out.md).
#   ROLLOUT_SERVERS=http://node-2:8000,http://node-2:8001 MASTER_ADDR=node-1 scripts/train_grpo_rollout_servers.sh
#   DRY_RUN=1 ROLLOUT_SERVERS=... MASTER_ADDR=node-1 scripts/train_grpo_rollout_servers.sh   # print, load nothing
# Trainer rank 0 sends the weights to every server over a process group at MMRL_TRANSFER_ADDR (default
# MASTER_ADDR:TRANSFER_PORT); every request carries MMRL_ROLLOUT_SECRET (the servers' own).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL_PATH=${MODEL_PATH:-checkpoints/Qwen2.5-VL-7B-Instruct}
CONFIG=${CONFIG:-configs/recipes/grpo_qwen2_5_vl_7b.yaml}
OUT_DIR=${OUT_DIR:-runs/grpo_rollout_servers}
ROLLOUT_SERVERS=${ROLLOUT_SERVERS:-http://127.0.0.1:8000}
TRANSFER_PORT=${TRANSFER_PORT:-29600}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
export MMRL_TRANSFER_ADDR=${MMRL_TRANSFER_ADDR:-$MASTER_ADDR:$TRANSFER_PORT}

loopback() { case "$1" in 127.*|localhost|::1) return 0;; *) return 1;; esac; }
remote=0
IFS=, read -r -a URLS <<< "$ROLLOUT_SERVERS"
for u in "${URLS[@]}"; do
  h=${u#*://}; h=${h%%:*}
  if loopback "$h"; then
    if [ "${NUM_NODES:-1}" -gt 1 ]; then
      echo "ROLLOUT_SERVERS: $u is loopback but the trainer spans ${NUM_NODES} nodes: give the servers' node address" >&2
      exit 2
    fi
  else
    remote=1
  fi
done
if [ "$remote" = 1 ] && loopback "${MMRL_TRANSFER_ADDR%:*}"; then
  echo "MMRL_TRANSFER_ADDR=$MMRL_TRANSFER_ADDR is loopback but servers run on other hosts: set MASTER_ADDR to this node's address" >&2
  exit 2
fi
if [ "$remote" = 1 ] && [ -z "${MMRL_ROLLOUT_SECRET:-}" ] && [ "${DRY_RUN:-0}" != 1 ]; then
  echo "the rollout servers are on other hosts: export MMRL_ROLLOUT_SECRET (the one they were started with)" >&2
  exit 2
fi
if [ "${DRY_RUN:-0}" = 1 ]; then
  secret="set"; [ -n "${MMRL_ROLLOUT_SECRET:-}" ] || secret="NOT SET"
  echo "# rollout servers: $ROLLOUT_SERVERS; weights from rank 0 via $MMRL_TRANSFER_ADDR; secret: $secret"
fi
set -- rollout.engine=vllm rollout.vllm_mode=server "rollout.servers=[$ROLLOUT_SERVERS]" "$@"
source scripts/_launch.sh
