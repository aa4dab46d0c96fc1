"""The mmrl arms of ``bench/vs_trl.py``: ``RLTrainer`` on the shared spec, timed per step (``run_mmrl(spec) -> dict``).

Run by ``vs_trl.py`` in a fresh subprocess. Per step (wall clock between the ends of consecutive steps):
``gen`` = ``RLTrainer.rollout`` (synchronous) or, under ``rollout.asynchronous.max_staleness >= 1``, the trainer's
wait for the worker's batch and its unpacking (``time/rollout_wait + time/rollout_unpack``: the rollout itself runs
in the worker, in parallel); ``score`` = rewards + the backend's scoring passes; the step's own ``time/rollout`` and
``time/step`` (mmrl's metrics, for the overlap efficiency of ``bench/async_overlap.py``); generated tokens and samples.
``processes`` = 1 + the rollout worker where there is one; the worker runs the trainer's thread count
(``mmrl.train.async_rollout``). Peak RSS: the trainer's own ``ru_maxrss`` and, in ``children_peak_rss_kb``, the sum
over its live child processes (the worker; multiprocessing's resource tracker) of each one's high-water RSS
(``bench/_tree_rss.py``), read at every step's end (a worker has drawn every batch by the last one).
"""
from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Dict, List

from _tree_rss import children_hwm_kb

REPO = Path(__file__).resolve().parent.parent


def run_mmrl(spec: Dict) -> Dict:
    import torch

    from mmrl.config import load_config
    from mmrl.train.rl_trainer import RLTrainer

    cfg = load_config([str(REPO / c) for c in spec["configs"]], spec["overrides"])
    tr = RLTrainer(cfg, quiet=True)
    if spec.get("baseline"):
        import mmrl.models.scoring as scoring

        tr.engine.shared_prefill = False
        scoring.can_share = lambda model: False
    acc = {"gen": 0.0, "score": 0.0, "tokens": 0, "samples": 0}

    def wrap(obj, name, key):
        fn = getattr(obj, name)

        def timed(*a, **k):
            t = time.perf_counter()
            out = fn(*a, **k)
            acc[key] += time.perf_counter() - t
            return out

        setattr(obj, name, timed)

    engine_generate = tr.engine.generate

    def generate(requests, params):
        trajs = engine_generate(requests, params)
        acc["tokens"] += sum(int(t.response_ids.numel()) for t in trajs)
        acc["samples"] += len(trajs)
        return trajs

    tr.engine.generate = generate
    wrap(tr, "rollout", "gen")
    wrap(tr, "rewards", "score")
    wrap(tr.backend, "score", "score")
    per_step: List[Dict] = []
    last, last_cpu = [time.perf_counter()], [time.process_time()]
    rss = [0]
    children: Dict[int, int] = {}
    step_fn = tr.train_step
    is_async = tr.async_rollouts is not None

    def train_step():
        m = step_fn()
        now = time.perf_counter()
        cpu = time.process_time()
        if is_async:  # generated in the worker: count what the trainer received, time what it waited
            acc["gen"] += m["time/rollout_wait"] + m["time/rollout_unpack"]
            acc["tokens"] += int(m["work/response_tokens"])  # response_len = response tokens / responses
            acc["samples"] += int(round(m["work/response_tokens"] / m["response_len"])) if m["response_len"] else 0
        per_step.append({"step": now - last[0], "cpu": cpu - last_cpu[0], "gen": acc["gen"], "score": acc["score"],
                         "tokens": acc["tokens"], "samples": acc["samples"],
                         "view_time_share": m.get("view_time_share", 0.0),
                         "resample_rounds": m.get("resample_rounds", 0.0), "reward": m.get("reward/total", 0.0),
                         **{k: m[k] for k in ("time/rollout", "time/step", "time/rollout_wait",
                                              "time/worker_generation") if k in m}})
        acc.update(gen=0.0, score=0.0, tokens=0, samples=0)
        last[0], last_cpu[0] = now, cpu
        rss[0] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        children_hwm_kb(children)
        return m

    tr.train_step = train_step
    last[0], last_cpu[0] = time.perf_counter(), time.process_time()
    tr.run()
    return {"per_step": per_step, "peak_rss_kb": rss[0], "threads": torch.get_num_threads(),
            "processes": 2 if is_async else 1, "children_peak_rss_kb": sum(children.values()),
            "children": len(children)}
