#!/usr/bin/env bash
# The device check (issue 43): one GRPO step's costs on real shapes (full-depth Qwen2.5-VL-3B, and 7B where it fits),
# as ONE table, on the lent GPU machine's own image: its python3 (3.12), torch 2.11 and transformers 5.17, no vLLM.
# mmrl runs from this tree (PYTHONPATH; not pip-installed: pyproject's torch range is not the image's); what the
# image lacks comes as wheels from .device_wheels/ (`make device-wheels` here first), installed into a temporary
# folder. Under 8 minutes on an H100: the check skips sections past --budget-s (420 s), `timeout` stops it at 470 s.
#
#   make device-wheels                    # here, once; then the device tool's run with carry [".device_wheels"]:
#   bash scripts/device_check.sh          # rows printed as they finish, then the table; $OUT/device_check.jsonl
#   bash scripts/device_check.sh --cpu    # the rehearsal on CPU (tiny and a 3B-wide depth-1 model; the suite runs it)
#
# Extra arguments go to `python -m mmrl.train.device_check` (--models 3b, --budget-s 300, ...).
# Exit status: 0 when every row passed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
SITE=$(mktemp -d "${TMPDIR:-/tmp}/mmrl-device-site.XXXXXX")
trap 'rm -rf "$SITE"' EXIT
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$PYVER" != "3.12" ]; then
    echo "[device_check] $PY is Python $PYVER; .device_wheels/ holds 3.12 wheels: only what $PY already has"
elif compgen -G ".device_wheels/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
        --target "$SITE" .device_wheels/*.whl
else
    echo "[device_check] no .device_wheels/ (make device-wheels): only what $PY already has"
fi
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
timeout 470 "$PY" -m mmrl.train.device_check --out "${OUT:-runs/device_check}" "$@"
