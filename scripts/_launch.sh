# Shared tail of scripts/train_*.sh (sourced, not run): builds the `deepspeed` launch of `mmrl train`.
# Expects MODEL_PATH DATA_PATH MEDIA_ROOT NUM_GPUS NUM_NODES HOSTFILE MASTER_ADDR MASTER_PORT CONFIG OUT_DIR PY,
# and the script's own arguments (dotted overrides) in "$@".
OVERRIDES=("model.path=$MODEL_PATH" "data.train=$DATA_PATH" "train.out_dir=$OUT_DIR")
if [ -n "$MEDIA_ROOT" ]; then OVERRIDES+=("data.media_root=$MEDIA_ROOT"); fi
OVERRIDES+=("$@")

DEEPSPEED=$(dirname "$PY")/deepspeed                # the venv's launcher, else the one on PATH
[ -x "$DEEPSPEED" ] || DEEPSPEED=deepspeed
LAUNCH=("$DEEPSPEED" --num_gpus "$NUM_GPUS" --master_port "$MASTER_PORT" --no_local_rank)
if [ "$NUM_NODES" -gt 1 ]; then
  if [ -z "$HOSTFILE" ] && [ "${DRY_RUN:-0}" != 1 ]; then
    echo "NUM_NODES=$NUM_NODES needs HOSTFILE (one line per node: '<host> slots=$NUM_GPUS')" >&2
    exit 2
  fi
  LAUNCH+=(--num_nodes "$NUM_NODES" --hostfile "${HOSTFILE:-hostfile}" --master_addr "$MASTER_ADDR")
fi
LAUNCH+=(--module mmrl train --config "$CONFIG")
RESUME=(--auto-resume)  # a rerun (or a requeue after preemption) continues from OUT_DIR's latest checkpoint

if [ "${DRY_RUN:-0}" = 1 ]; then
  echo "# launch: ${LAUNCH[*]} ${RESUME[*]+${RESUME[*]}} ${OVERRIDES[*]}"
  echo "# ranks: $((NUM_GPUS * NUM_NODES)) ($NUM_NODES node(s) x $NUM_GPUS GPU(s))"
  exec "$PY" -m mmrl train --dry-run --no-data-check "${RESUME[@]}" --config "$CONFIG" "${OVERRIDES[@]}"
fi
exec "${LAUNCH[@]}" ${RESUME[@]+"${RESUME[@]}"} "${OVERRIDES[@]}"
