"""GRPO steps with rollouts on two real rollout servers (vLLM's CPU build, loopback): two DeepSpeed CPU ranks whose
rollouts both servers serve, then one trainer whose servers, first loaded with other weights, match its scorer from
step 1 on and after every weight sync (<= 1e-5, fp32), a server killed mid-run (the run ends naming it, with the
last step's checkpoint) and the run resumed."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm")

from server_support import REPO, SECRET, free_port, start_servers  # noqa: E402

REWARDS = REPO / "tests" / "train"  # ds_rewards: a reward that varies with the tokens, so the weights move

pytestmark = pytest.mark.slow
CONFIG = """
model: {{path: {model}, dtype: float32}}
data: {{nframes: 4, max_pixels: 3136, train: {train}}}
rollout: {{engine: vllm, vllm_mode: server, servers: [{servers}], n: 4, temperature: 1.0, max_new_tokens: 4,
          server_timeout_s: 60}}
train: {{steps: 2, prompts_per_step: 4, micro_batch: 8, lr: 1.0e-2, seed: 0, save_every: 1}}
algorithm: {{name: grpo, loss: ppo, kl_coef: 0.0}}
rewards:
  - {{name: "ds_rewards:even_tokens", weight: 1.0}}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_path):
    from mmrl.data.synth_video import make_video_world

    root = tmp_path_factory.mktemp("server_train")
    servers = start_servers(tiny_model_path, root, 2)
    world = make_video_world(str(root / "world"), 8, 2, seed=0, n_frames=4)
    cfg = root / "cfg.yaml"
    cfg.write_text(CONFIG.format(model=tiny_model_path, train=world["train"], servers=", ".join(s.url for s in servers)))
    yield root, cfg, servers, world
    for s in servers:
        s.stop()


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=10) as r:
        return json.loads(r.read())


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed")
@pytest.mark.parametrize("zero", ["zero2", "zero3"])  # ZeRO-3: the weights reach the servers bucket by bucket
def test_two_deepspeed_ranks_roll_out_on_two_servers(run, zero):
    root, cfg, servers, _ = run
    before = [health(s.url) for s in servers]
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", MMRL_ROLLOUT_SECRET=SECRET,
               PYTHONPATH=os.pathsep.join([str(REPO), str(REWARDS), os.environ.get("PYTHONPATH", "")]))
    out = root / f"two_ranks_{zero}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "mmrl", "train", "--config", str(cfg), "train.backend=deepspeed", f"train.out_dir={out}",
           f"train.deepspeed_config=configs/deepspeed/{zero}.json"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    after = [health(s.url) for s in servers]
    for row in rows:
        print("two ranks:", {k: row[k] for k in ("step", "loss", "grad_norm", "reward/total") if k in row})
    print("served (prompts, syncs) per server:", [(a["prompts"] - b["prompts"], a["syncs"] - b["syncs"])
                                                  for a, b in zip(after, before)])
    assert [r["step"] for r in rows] == [1, 2] and all(r["grad_norm"] > 0 for r in rows)
    # 4 groups x 1 view per step, group g on server g mod 2, from both ranks; 2 steps (+ the start's sync)
    assert [a["prompts"] - b["prompts"] for a, b in zip(after, before)] == [4, 4]
    assert all(a["syncs"] - b["syncs"] >= 2 for a, b in zip(after, before))


def test_parity_after_every_sync_a_killed_server_and_a_resumed_run(run, monkeypatch):
    from mmrl.config import DataConfig, load_config
    from mmrl.data.annotations import load_samples
    from mmrl.rollout.base import SamplingParams
    from mmrl.rollout.parity import logprob_parity
    from mmrl.rollout.step_inputs import build_step_inputs
    from mmrl.rollout.vllm_client import RolloutServerError
    from mmrl.train.rl_trainer import RLTrainer

    root, cfg, servers, world = run
    monkeypatch.setenv("MMRL_ROLLOUT_SECRET", SECRET)
    monkeypatch.syspath_prepend(str(REWARDS))
    out = root / "one_trainer"
    trainer = RLTrainer(load_config([str(cfg)], [f"train.out_dir={out}", "train.steps=3", "train.save_every=0"]), quiet=True)
    samples, _ = load_samples(world["train"], None, on_error="skip")
    requests = build_step_inputs(samples[:2], trainer.processor, DataConfig(nframes=4, max_pixels=3136),
                                 lambda role, n_views: 2).requests
    for r in requests:
        r.meta["seed"] = 7 + int(r.group_id)
    gaps, stale = [], []
    sync = trainer.backend.sync_rollout_weights
    # the servers hold other weights than the trainer's (an earlier run's): the run's start must replace them
    originals = [p.detach().clone() for p in trainer.model.parameters()]
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(torch.randn_like(p), alpha=0.02)
    sync(trainer.engine)
    with torch.no_grad():
        for p, original in zip(trainer.model.parameters(), originals):
            p.copy_(original)

    def gap(engine) -> float:
        return logprob_parity(engine, trainer.model, requests, SamplingParams(max_new_tokens=6),
                              trainer.processor.tokenizer.pad_token_id).max_abs

    def sync_and_check(engine, everything=False):  # the start's sync, then each step's: servers vs trainer's scorer
        stale.append(gap(engine))  # the trainer's weights moved at this step's update (or the start), the servers' not
        sync(engine, everything=everything)
        gaps.append(gap(engine))
        if len(gaps) == 3:
            servers[1].stop()  # killed after step 2: step 3's rollouts find it dead

    trainer.backend.sync_rollout_weights = sync_and_check
    with pytest.raises(RolloutServerError, match=servers[1].url.replace(".", r"\.")) as e:
        trainer.run()
    print("parity max_abs after each sync:", [f"{g:.2e}" for g in gaps], "before it:", [f"{g:.2e}" for g in stale])
    print("killed server:", e.value)
    assert len(gaps) == 3 and max(gaps) <= 1e-5 and min(stale) > 1e-3
    assert (out / "checkpoints" / "step_000002").exists()
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and max(r["mismatch/max_abs_diff"] for r in rows) <= 1e-4

    resumed = RLTrainer(load_config([str(cfg)], [f"train.out_dir={out}", "train.steps=3",
                                                 f"rollout.servers=[{servers[0].url}]"]), quiet=True)
    history = resumed.run(resume=True)
    print("resumed on one server:", [{k: h[k] for k in ("step", "loss") if k in h} for h in history])
    assert [h["step"] for h in history] == [3]
