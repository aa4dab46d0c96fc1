#!/usr/bin/env bash
# One-GPU check of what only a GPU shows (issue 26 items 2, 4, 5, 6, 7), under 8 minutes: a random-init model with
# Qwen2.5-VL-7B's widths, heads, KV heads, mrope sections and window/full vision blocks at reduced depth (2 text
# layers, 4 vision blocks), vLLM colocated. Prints ONE table (check, PASS/FAIL, numbers); the checks are functions of
# mmrl/train/gpu_checks.py (CPU-tested in tests/train/test_gpu_checks.py), run by `python -m mmrl.train.gpu_smoke`.
#
#   bash scripts/gpu_smoke.sh                 # needs: CUDA, `pip install -e ".[vllm]"` in the venv
#   WITH_GRPO=1 bash scripts/gpu_smoke.sh     # also 3 GRPO steps on the tiny model, vLLM colocated, parity probe
#                                             # after every weight sync (adds ~2 min)
#
# Rows: precision (10 AdamW steps at lr 1e-6: share of entries changed, fp32 master weights vs pure bf16),
# checkpointing (log-prob / gradient gap, seconds and peak CUDA MB with and without; shared-prompt layouts),
# lora_sync (50 syncs, r 64 alpha 128 on all 7 projections: base entries changed, sent - fp32 formula, reference gap),
# cache_reset (vLLM prefix / mm / encoder resets per sync; vLLM vs scorer after a vision-weight change),
# positions (vLLM vs scorer on a 16-frame 448x224 clip over 60 s: ~1000 video tokens, text 90 positions past
# transformers 5.x's numbering), grpo (WITH_GRPO=1).
# Exit status: 0 when every row passes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/gpu_smoke}
TOL=${TOL:-0.05}                  # max |vLLM - scorer| log-prob gap in bf16
WITH_GRPO=${WITH_GRPO:-0}
mkdir -p "$OUT"
export OUT TOL

"$PY" - <<'PYEOF'
import importlib.util, sys, torch
if not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None:
    sys.exit("gpu_smoke: needs a CUDA GPU and vLLM (pip install -e '.[vllm]')")
print("[smoke] GPU:", torch.cuda.get_device_name(0))
PYEOF

echo "[smoke] 1/4 reduced Qwen2.5-VL-7B (random init, real widths)"
[ -f "$OUT/model/config.json" ] || "$PY" -m mmrl.train.gpu_smoke build --out "$OUT/model" > /dev/null

echo "[smoke] 2/4 positions table (mmrl.models.mrope)"
if "$PY" -c "import mmrl.models.mrope" 2> /dev/null; then
    "$PY" -m mmrl.models.mrope --table > "$OUT/positions_table.md" && echo "[smoke] written: $OUT/positions_table.md"
else
    echo "[smoke] POSITIONS STEP NOT WIRED: mmrl/models/mrope.py is absent (the positions row still runs the parity)"
fi

echo "[smoke] 3/4 checks: precision, checkpointing, LoRA sync, vLLM cache resets, positions"
"$PY" -m mmrl.train.gpu_smoke run --model "$OUT/model" --out "$OUT/checks.json" --tol "$TOL" || true
tables=("$OUT/checks.json")

if [ "$WITH_GRPO" = "1" ]; then
    echo "[smoke] 4/4 three GRPO steps (tiny model, bf16 + fp32 master weights), vLLM colocated, parity after every sync"
    "$PY" -m mmrl data synth --out "$OUT/world" --n-train 64 --n-test 16 --frames 4 --size 56 > /dev/null
    "$PY" - <<'PYEOF' || true
import json, os
from mmrl.config import load_config
from mmrl.rollout.base import SamplingParams
from mmrl.rollout.parity import logprob_parity
from mmrl.train.rl_trainer import RLTrainer

out, tol = os.environ["OUT"], float(os.environ["TOL"])
cfg = load_config(["configs/demo.yaml"], [f"data.train={out}/world/train.json", f"data.test={out}/world/test.json",
                  "model.dtype=bfloat16", "train.precision=bf16", "rollout.engine=vllm", "rollout.vllm_mode=colocate",
                  "train.steps=3", "train.prompts_per_step=8", "rollout.n=8", "rollout.max_new_tokens=16",
                  f"train.out_dir={out}/grpo"])
trainer = RLTrainer(cfg, quiet=True)
probe_si, _ = trainer.rollout(trainer.samples[:4])
worst, tps = 0.0, []
for _ in range(3):
    m = trainer.train_step()
    rep = logprob_parity(trainer.engine, trainer.model, probe_si.requests, SamplingParams(max_new_tokens=16),
                         trainer.pad_id)
    worst, tps = max(worst, rep.max_abs), tps + [m.get("tokens_per_s") or 0.0]
json.dump({"grpo": {"steps": 3, "parity_max_abs": worst, "rollout_tokens_per_s": sum(tps) / len(tps),
                    "ok": worst <= tol}}, open(f"{out}/grpo.json", "w"))
PYEOF
    [ -f "$OUT/grpo.json" ] && tables+=("$OUT/grpo.json")
else
    echo "[smoke] 4/4 skipped (WITH_GRPO=1 adds 3 GRPO steps with vLLM colocated)"
fi

echo
"$PY" -m mmrl.train.gpu_smoke table "${tables[@]}"
