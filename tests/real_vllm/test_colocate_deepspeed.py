"""Two DeepSpeed ZeRO-2 CPU ranks (gloo), each with its own colocated vLLM engine (vLLM's CPU build,
``distributed_executor_backend="external_launcher"``, tensor parallel 1: vLLM lays the launcher's 2-process world
out as ExternalDP x DP x PP x PCP x TP = 2 x 1 x 1 x 1 x 1, two independent replicas, ``initialize_model_parallel``
in vllm/distributed/parallel_state.py). Two GRPO steps, weights synced into both engines after each step.

Checked against a one-process run of the same config with the same rank-count-invariant sampling
(``rollout.seed_per_group``): both ranks' rollouts come back (each rank drew its own prompts, none twice), together
they are the one-process run's draws token for token (so the ranks drew different samples exactly where one process
does: per prompt group, never a rank's copy of another's), and every step's sampler/trainer mismatch over both
ranks' rows is <= 1e-4 (fp32; the weights moved, so step 2 scores the synced weights)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from server_support import REPO, free_port  # noqa: E402

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                                   reason="DeepSpeed is not installed")]
CONFIG = """
model: {{path: {model}, dtype: float32}}
data: {{nframes: 4, max_pixels: 3136, max_prompt_tokens: 1024, train: {train}}}
rollout: {{engine: vllm, n: 4, temperature: 1.0, max_new_tokens: 4, seed_per_group: true}}
train: {{steps: 2, prompts_per_step: 4, micro_batch: 8, lr: 1.0e-2, seed: 0, save_every: 0, eval_every: 0}}
algorithm: {{name: grpo, loss: ppo, kl_coef: 0.0}}
rewards:
  - {{name: "rank_rewards:logged_even_tokens", weight: 1.0}}
"""


def train(cfg: Path, out: Path, ranks: int) -> list:
    """``mmrl train`` in a fresh process (2 ranks: torchrun + DeepSpeed on the CPU accelerator); its metrics rows."""
    out.mkdir(parents=True)
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", VLLM_CPU_KVCACHE_SPACE="1",
               MMRL_TEST_DRAWS=str(out), PYTHONPATH=os.pathsep.join([str(REPO), str(HERE)]))
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_port",
              str(free_port()), "-m", "mmrl"] if ranks > 1 else [sys.executable, "-m", "mmrl"]
    backend = "deepspeed" if ranks > 1 else "torch"
    proc = subprocess.run([*launch, "train", "--config", str(cfg), f"train.backend={backend}", f"train.out_dir={out}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def draws(out: Path, rank: int) -> list:
    return [json.loads(line) for line in (out / f"rank{rank}.jsonl").read_text().splitlines()]


def key(d: dict) -> tuple:
    return d["sample"], d["group"], tuple(d["ids"])


def test_two_deepspeed_ranks_each_with_a_colocated_vllm(tmp_path, tiny_model_path):
    from mmrl.data.synth_video import make_video_world

    world = make_video_world(str(tmp_path / "world"), 8, 2, seed=0, n_frames=4)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG.format(model=tiny_model_path, train=world["train"]))
    ref_rows, rows = train(cfg, tmp_path / "one", 1), train(cfg, tmp_path / "two", 2)
    for row in rows:
        print("two ranks + vLLM:", {k: row[k] for k in ("step", "ranks", "grad_norm", "reward/total", "mismatch/tokens",
                                                         "mismatch/max_abs_diff")})
    assert [r["step"] for r in rows] == [1, 2] and all(r["ranks"] == 2.0 for r in rows)
    assert all(r["grad_norm"] > 0 for r in rows)  # the weights moved: step 2 samples and scores synced weights
    rank0, rank1, ref = draws(tmp_path / "two", 0), draws(tmp_path / "two", 1), draws(tmp_path / "one", 0)
    # 2 steps x 2 of the 4 prompts per rank x n=4 responses each; the ranks' prompts are disjoint within a step
    assert len(rank0) == len(rank1) == 16
    for step in (slice(0, 8), slice(8, 16)):
        assert not {d["sample"] for d in rank0[step]} & {d["sample"] for d in rank1[step]}
    # both ranks' draws are the one-process run's, token for token (per-group seeds, not per-rank engines)
    assert Counter(map(key, rank0 + rank1)) == Counter(map(key, ref))
    groups = Counter((d["sample"], d["group"]) for d in ref)
    assert all(len({tuple(d["ids"]) for d in ref if (d["sample"], d["group"]) == g}) > 1 for g in groups)
    for step, (got, want) in enumerate(zip(rows, ref_rows)):
        # both ranks' trained rows are in the mismatch (its tokens: both ranks' responses), sampler == trainer
        mine = rank0[8 * step:8 * step + 8] + rank1[8 * step:8 * step + 8]
        assert got["mismatch/tokens"] == want["mismatch/tokens"] == sum(len(d["ids"]) for d in mine)
        assert got["mismatch/max_abs_diff"] <= 1e-4, got
        assert got["reward/total"] == pytest.approx(want["reward/total"], abs=1e-6)
