#!/usr/bin/env bash
# One-GPU smoke test of the vLLM path, under 8 minutes: tiny Qwen2.5-VL, vLLM colocated (sleep/wake), 3 GRPO steps
# with a sampler/trainer parity probe after every weight sync, generation throughput (vLLM vs the HF engine).
#
#   bash scripts/gpu_smoke.sh                 # needs: CUDA, `pip install vllm` in the venv
#   DTYPE=float32 TOL=1e-3 bash scripts/gpu_smoke.sh
#   WITH_DEEPSPEED=1 bash scripts/gpu_smoke.sh   # also 3 steps on the DeepSpeed backend (1 rank, ZeRO-2, bf16)
#
# Exit status: 0 when every parity probe is within TOL, 1 otherwise (the report says which sample/token).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/gpu_smoke}
DTYPE=${DTYPE:-bfloat16}          # the trainer's and vLLM's dtype
TOL=${TOL:-0.05}                  # max |log-prob difference|; bf16 kernels differ by ~1e-2, use 1e-3 with float32
WITH_DEEPSPEED=${WITH_DEEPSPEED:-0}
mkdir -p "$OUT"
export OUT DTYPE TOL

"$PY" - <<'EOF'
import importlib.util, sys, torch
if not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None:
    sys.exit("gpu_smoke: needs a CUDA GPU and vLLM (pip install vllm)")
print("[smoke] GPU:", torch.cuda.get_device_name(0))
EOF

echo "[smoke] 1/4 synthetic world"
"$PY" -m mmrl data synth --out "$OUT/world" --n-train 64 --n-test 16 --frames 4 --size 56 > /dev/null

echo "[smoke] 2/4 parity on a fresh model: vLLM sampling log-probs vs the trainer's scorer"
"$PY" -m mmrl.rollout.parity --engine vllm --model tiny --dtype "$DTYPE" --data "$OUT/world/train.json" \
    --prompts 8 --n 4 --max-new-tokens 16 --tol "$TOL" --out "$OUT/parity_fresh.json" || echo "[smoke] PARITY FAILED (fresh)"

echo "[smoke] 3/4 three GRPO steps, vLLM colocated, parity probe after every weight sync"
status=0
"$PY" - <<'EOF' || status=$?
import json, os, sys, time
import torch
from mmrl.config import load_config
from mmrl.rollout.base import SamplingParams, build_engine
from mmrl.rollout.parity import logprob_parity
from mmrl.train.rl_trainer import RLTrainer

out, dtype, tol = os.environ["OUT"], os.environ["DTYPE"], float(os.environ["TOL"])
cfg = load_config(["configs/demo.yaml"], [f"data.train={out}/world/train.json", f"data.test={out}/world/test.json",
                  f"model.dtype={dtype}", "rollout.engine=vllm", "rollout.vllm_mode=colocate", "train.steps=3",
                  "train.prompts_per_step=8", "rollout.n=8", "rollout.max_new_tokens=16", f"train.out_dir={out}/grpo"])
t0 = time.time()
trainer = RLTrainer(cfg, quiet=True)
print(f"[smoke] trainer + vLLM up in {time.time() - t0:.0f}s")
probe_si, _ = trainer.rollout(trainer.samples[:4])
params = SamplingParams(temperature=1.0, max_new_tokens=16)
reports, ok = [], True
for step in range(3):
    m = trainer.train_step()
    rep = logprob_parity(trainer.engine, trainer.model, probe_si.requests, params, trainer.pad_id)
    ok &= rep.ok(tol)
    reports.append({"step": trainer.step, "reward": m.get("reward/total"), "tokens_per_s": m.get("tokens_per_s"),
                    "time_rollout": m.get("time/rollout"), "time_update": m.get("time/update"),
                    "parity_max_abs": rep.max_abs, "parity_worst": rep.worst})
    print("[smoke]", json.dumps(reports[-1]))
hf = build_engine("hf", model=trainer.model, processor=trainer.processor)
t = time.perf_counter()
trajs = hf.generate(probe_si.requests, params)
hf_tps = sum(int(x.response_ids.numel()) for x in trajs) / (time.perf_counter() - t)
vllm_tps = sum(r["tokens_per_s"] or 0 for r in reports) / len(reports)
print(f"[smoke] throughput: vLLM {vllm_tps:.0f} tokens/s (rollout of a step), HF engine {hf_tps:.0f} tokens/s (probe)")
json.dump({"steps": reports, "hf_tokens_per_s": hf_tps, "ok": ok}, open(f"{out}/grpo_smoke.json", "w"), indent=1)
sys.exit(0 if ok else 1)
EOF

if [ "$WITH_DEEPSPEED" = "1" ]; then
    echo "[smoke] 4/4 DeepSpeed backend (1 rank, ZeRO-2, bf16) + vLLM colocated, 3 steps"
    "$PY" -m torch.distributed.run --nproc_per_node 1 -m mmrl train --config configs/demo.yaml \
        data.train="$OUT/world/train.json" train.backend=deepspeed train.precision=bf16 rollout.engine=vllm \
        train.steps=3 train.prompts_per_step=8 rollout.n=8 train.out_dir="$OUT/ds"
else
    echo "[smoke] 4/4 skipped (WITH_DEEPSPEED=1 to run the DeepSpeed backend too)"
fi
fresh_ok=$("$PY" -c "import json; print(int(json.load(open('$OUT/parity_fresh.json'))['ok']))" 2>/dev/null || echo 0)
if [ "$status" -ne 0 ] || [ "$fresh_ok" != "1" ]; then
    echo "[smoke] FAILED: parity over TOL=$TOL (reports in $OUT/parity_fresh.json, $OUT/grpo_smoke.json)"
    exit 1
fi
echo "[smoke] OK"
