# Shared tail of scripts/train_*.sh (sourced, not run): builds the `deepspeed` launch of `mmrl train` (or, with
# LAUNCH_MODE=single, one process: `mmrl $MMRL_CMD`). A script sets CONFIG, MODEL_PATH, OUT_DIR (and NUM_GPUS when
# not 8) and sources this; every variable can also come from the environment. The script's own arguments are
# dotted config overrides ("$@").
DATA_PATH=${DATA_PATH:-data/train.json}   # annotation file (see mmrl/data/annotations.py)
MEDIA_ROOT=${MEDIA_ROOT:-}                # where relative media paths start (default: next to DATA_PATH)
NUM_GPUS=${NUM_GPUS:-8}                   # per node
NUM_NODES=${NUM_NODES:-1}
HOSTFILE=${HOSTFILE:-}                    # required when NUM_NODES > 1: one line per node, "<host> slots=<gpus>"
MASTER_PORT=${MASTER_PORT:-29500}
LAUNCH_MODE=${LAUNCH_MODE:-deepspeed}     # deepspeed | single (one process: multi-turn tools, streaming)
MMRL_CMD=${MMRL_CMD:-train}               # single mode: the mmrl command (train | rectify)
PY=${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python)}

# the rendezvous address: MASTER_ADDR if given, else the hostfile's first host (multi-node), else loopback
if [ -z "${MASTER_ADDR:-}" ]; then
  MASTER_ADDR=127.0.0.1
  if [ "$NUM_NODES" -gt 1 ] && [ -n "$HOSTFILE" ] && [ -f "$HOSTFILE" ]; then
    MASTER_ADDR=$(awk '!/^[[:space:]]*(#|$)/ {print $1; exit}' "$HOSTFILE")
  fi
fi

OVERRIDES=("model.path=$MODEL_PATH" "data.train=$DATA_PATH" "train.out_dir=$OUT_DIR")
if [ -n "$MEDIA_ROOT" ]; then OVERRIDES+=("data.media_root=$MEDIA_ROOT"); fi
OVERRIDES+=("$@")

DEEPSPEED=$(dirname "$PY")/deepspeed                # the venv's launcher, else the one on PATH
[ -x "$DEEPSPEED" ] || DEEPSPEED=deepspeed
LAUNCH=("$DEEPSPEED" --num_gpus "$NUM_GPUS" --master_port "$MASTER_PORT" --no_local_rank)
if [ "$NUM_NODES" -gt 1 ]; then
  if [ -z "$HOSTFILE" ]; then  # a dry run refuses too: its plan would show a loopback rendezvous no node can reach
    echo "NUM_NODES=$NUM_NODES needs HOSTFILE (one line per node: '<host> slots=$NUM_GPUS')" >&2
    exit 2
  fi
  LAUNCH+=(--num_nodes "$NUM_NODES" --hostfile "$HOSTFILE" --master_addr "$MASTER_ADDR")
fi
LAUNCH+=(--module mmrl train --config "$CONFIG")
RESUME=(--auto-resume)  # a rerun (or a requeue after preemption) continues from OUT_DIR's latest checkpoint
if [ "$LAUNCH_MODE" = single ]; then
  LAUNCH=("$PY" -m mmrl "$MMRL_CMD" --config "$CONFIG")
  [ "$MMRL_CMD" = train ] || RESUME=()   # mmrl rectify resumes by its stages' final/ folders
fi

if [ "${DRY_RUN:-0}" = 1 ]; then
  echo "# launch: ${LAUNCH[*]} ${RESUME[*]+${RESUME[*]}} ${OVERRIDES[*]}"
  if [ "$LAUNCH_MODE" = single ]; then
    echo "# ranks: 1 (one process on one GPU)"
  else
    echo "# ranks: $((NUM_GPUS * NUM_NODES)) ($NUM_NODES node(s) x $NUM_GPUS GPU(s)); rendezvous: $MASTER_ADDR:$MASTER_PORT"
  fi
  exec "$PY" -m mmrl train --dry-run --no-data-check --auto-resume --config "$CONFIG" "${OVERRIDES[@]}"
fi
if [ "$LAUNCH_MODE" != single ] && [ "${PREFLIGHT:-1}" = 1 ]; then
  # the deepspeed launcher imports torch and DeepSpeed before any rank starts: bad data or a bad key stops here first,
  # in one process that imports neither (each rank checks again; PREFLIGHT=0 skips this pass)
  "$PY" -m mmrl train --preflight-only ${RESUME[@]+"${RESUME[@]}"} --config "$CONFIG" "${OVERRIDES[@]}" || exit $?
fi
exec "${LAUNCH[@]}" ${RESUME[@]+"${RESUME[@]}"} "${OVERRIDES[@]}"
