#!/usr/bin/env bash
# Rollout servers for rollout.vllm_mode=server: one `python -m mmrl.rollout.vllm_server` per GPU of ROLLOUT_GPUS on
# this node, ports BASE_PORT, BASE_PORT+1, ... Needs GPUs (CUDA vLLM; docs/scale_out.md "Rollout servers").
#   MMRL_ROLLOUT_SECRET=$(openssl rand -hex 16) SERVER_HOST=node-2 ROLLOUT_GPUS=0,1,2,3 scripts/rollout_server.sh
#   DRY_RUN=1 SERVER_HOST=node-2 TRAINER_HOST=node-1 scripts/rollout_server.sh   # print the commands and URLs only
# SERVER_HOST is the address the servers bind and the trainer connects to: loopback (the default) only when the
# trainer runs on this node. Every request needs MMRL_ROLLOUT_SECRET (required off loopback; the trainer sends it).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL_PATH=${MODEL_PATH:-checkpoints/Qwen2.5-VL-7B-Instruct}  # the trainer's starting checkpoint
SERVER_HOST=${SERVER_HOST:-127.0.0.1}
TRAINER_HOST=${TRAINER_HOST:-$SERVER_HOST}  # where the trainer's rank 0 runs (it sends the weights)
ROLLOUT_GPUS=${ROLLOUT_GPUS:-0}             # one server per GPU, comma-separated
BASE_PORT=${BASE_PORT:-8000}
DTYPE=${DTYPE:-bfloat16}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-8192}
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.9}
PY=${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python)}

loopback() { case "$1" in 127.*|localhost|::1) return 0;; *) return 1;; esac; }
if loopback "$SERVER_HOST" && ! loopback "$TRAINER_HOST" && [ "$TRAINER_HOST" != "$(hostname)" ]; then
  echo "SERVER_HOST=$SERVER_HOST is loopback but the trainer runs on $TRAINER_HOST: set SERVER_HOST to this node's address" >&2
  exit 2
fi
if ! loopback "$SERVER_HOST" && [ -z "${MMRL_ROLLOUT_SECRET:-}" ] && [ "${DRY_RUN:-0}" != 1 ]; then
  echo "SERVER_HOST=$SERVER_HOST is reachable from other hosts: export MMRL_ROLLOUT_SECRET (the trainer needs the same)" >&2
  exit 2
fi

IFS=, read -r -a GPUS <<< "$ROLLOUT_GPUS"
URLS=()
CMDS=()
for i in "${!GPUS[@]}"; do
  port=$((BASE_PORT + i))
  URLS+=("http://$SERVER_HOST:$port")
  CMDS+=("CUDA_VISIBLE_DEVICES=${GPUS[$i]} $PY -m mmrl.rollout.vllm_server --model $MODEL_PATH --host $SERVER_HOST --port $port --dtype $DTYPE --max-model-len $MAX_MODEL_LEN --gpu-memory-utilization $GPU_MEMORY_UTILIZATION")
done
SERVERS=$(IFS=,; echo "${URLS[*]}")

if [ "${DRY_RUN:-0}" = 1 ]; then
  secret="set"; [ -n "${MMRL_ROLLOUT_SECRET:-}" ] || secret="NOT SET (export MMRL_ROLLOUT_SECRET=\$(openssl rand -hex 16))"
  echo "# rollout servers on $SERVER_HOST: ${#GPUS[@]} x 1 GPU (${ROLLOUT_GPUS}), secret: $secret"
  for c in "${CMDS[@]}"; do echo "# server: $c"; done
  echo "# URLs: $SERVERS"
  echo "# trainer ($TRAINER_HOST): ROLLOUT_SERVERS=$SERVERS MASTER_ADDR=$TRAINER_HOST scripts/train_grpo_rollout_servers.sh"
  exit 0
fi
pids=()
for c in "${CMDS[@]}"; do
  echo "[rollout_server] $c"
  bash -c "exec $c" &
  pids+=($!)
done
echo "[rollout_server] URLs: $SERVERS"
trap 'kill "${pids[@]}" 2>/dev/null' INT TERM
wait -n "${pids[@]}"  # one server gone: stop the others (the trainer ends with a checkpoint)
kill "${pids[@]}" 2>/dev/null || true
exit 1
