"""One RL step, for every algorithm and backend (DESIGN.md, "One RL step, as data flows").

rollout -> rewards -> [re-scoring under interventions] -> gather the global batch -> spec.advantages ->
spec.select (resample while it asks) -> old / reference passes on the selected rows -> policy update ->
scheduler, weight sync -> spec.after_step -> metrics.

The step never tests an algorithm's name: what differs between methods is the spec's hooks
(``mmrl.algos.spec``); what differs between torch and DeepSpeed is the backend (``mmrl.train.backend``); what
differs between rollout loops is their capabilities (``mmrl.rollout.agent_loop.LoopCapabilities``). It receives a
``StepContext`` (``RLTrainer.step_context()``), not the trainer, and leaves the step count to its caller.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import torch

from mmrl.algos.spec import StepBatch
from mmrl.models.feature_mask import score_with_masked_boxes
from mmrl.rollout.step_inputs import intervened_inputs
from mmrl.rollout.view_metrics import view_metrics
from mmrl.train.correction import Correction, batch_norm_factor, step_metrics
from mmrl.train.metrics import entropy_sums
from mmrl.train.skips import record_step_skips
from mmrl.train.step_details import step_details
from mmrl.train.update import policy_update
from mmrl.tools.trajectory_log import log_trajectories


@dataclass
class StepContext:
    """What one RL step reads and calls."""

    cfg: Any  # the run's Config
    backend: Any  # mmrl.train.backend.Backend (rank helpers, score, update, weight sync)
    spec: Any  # the AlgorithmSpec
    stream: Any  # the DataStream: next(n) prompts, epoch
    processor: Any
    engine: Any  # the rollout engine (weights synced after the update)
    rollout: Callable  # (samples, group_offset=0) -> (StepInputs, trajectories) of this rank
    rewards: Callable  # (StepInputs, trajectories) -> (components, total)
    loop: Any  # the rollout loop's LoopCapabilities (its metrics; tool episodes are logged)
    step: int  # steps done before this one
    abstain_text: Optional[str] = None  # the view set's abstention answer (view metrics), None without a view set
    skips: Any = None  # the run's SkipLog (mmrl.train.skips); None outside RLTrainer.run
    details: Optional[Dict[str, Any]] = None  # filled with mmrl.train.step_details.step_details when a dict
    detail_samples: bool = False  # ... with the completions table and the views' contact sheet too


def merge_step_inputs(si, trajs, si2, trajs2):
    """Append a resampling round (``si2``, ``trajs2``) to the step's inputs; ``inputs_key`` is re-based."""
    offset = len(si.requests)
    for t in trajs2:
        t.inputs_key += offset
    si.requests.extend(si2.requests)
    for name in ("samples", "candidates", "media", "views"):
        getattr(si, name).update(getattr(si2, name))
    si.skipped.extend(si2.skipped)
    si.skipped_views.extend(si2.skipped_views)
    si.time_decode += si2.time_decode
    si.time_views += si2.time_views
    return si, trajs + trajs2


def rescore(tr, si, trajs) -> None:
    """Fill ``t.rescored[name]`` for every intervention the spec needs: the same response tokens, teacher-forced
    under the intervened view of the media (no resampling); with ``feature_box``, each response on its own with the
    visual tokens inside its box zeroed (NaN where it has no box). Every rank calls the scorer equally often."""
    for name, iv in tr.spec.needs().rescore.items():
        todo = [t for t in trajs if name not in t.rescored]
        keys = sorted({(t.sample_id, t.view) for t in todo})
        built = intervened_inputs(si, keys, tr.processor, tr.cfg.data, iv.transform, dict(iv.params),
                                  seed=tr.cfg.train.seed * 1000003 + tr.step) if keys else {}
        items = [(built[(t.sample_id, t.view)], t.response_ids) for t in todo]
        fallback = (si.requests[trajs[0].inputs_key].inputs, trajs[0].response_ids) if trajs else None
        if iv.feature_box is None:
            lps = tr.backend.score(items, fallback=fallback)
        else:
            boxes = [iv.feature_box(t.text) for t in todo]
            calls = int(tr.backend.all_reduce([sum(b is not None for b in boxes)], "max")[0])
            lps = score_with_masked_boxes(tr.backend.model, lambda its: tr.backend.score(its, fallback=fallback),
                                          items, boxes, calls=calls)
            lps = [torch.full((t.response_ids.numel(),), float("nan")) if lp is None else lp for t, lp in zip(todo, lps)]
        for t, lp in zip(todo, lps):
            t.rescored[name] = lp.detach().float().cpu()


def gather_batch(tr, trajs, comps, total):
    """The global ``StepBatch`` (ranks in order) and this rank's row range ``(lo, hi)`` in it."""
    local = {"total": total.tolist(), "comps": {k: v.tolist() for k, v in comps.items()},
             "gids": [t.group_id for t in trajs], "packs": [t.pack_id for t in trajs], "roles": [t.role for t in trajs],
             "weights": [t.view_weight for t in trajs],
             "views": [t.view for t in trajs], "ids": [t.response_ids for t in trajs], "texts": [t.text for t in trajs],
             "lps": [t.logprobs for t in trajs], "rescored": [dict(t.rescored) for t in trajs]}
    parts = tr.backend.gather(local)
    cat = lambda key: [x for p in parts for x in p[key]]  # noqa: E731
    names = sorted({k for p in parts for k in p["comps"]})
    counts = [len(p["total"]) for p in parts]
    lo = sum(counts[: tr.backend.rank])
    ids, rescored = cat("ids"), cat("rescored")
    batch = StepBatch(
        rewards=torch.tensor(cat("total"), dtype=torch.float32),
        components={k: torch.tensor([x for p in parts for x in p["comps"].get(k, [])]) for k in names},
        groups={"prompt": torch.tensor(cat("gids"), dtype=torch.long), "pack": torch.tensor(cat("packs"), dtype=torch.long)},
        roles=cat("roles"), views=cat("views"), lengths=torch.tensor([int(x.numel()) for x in ids], dtype=torch.long),
        view_weights=torch.tensor(cat("weights"), dtype=torch.float64),
        response_ids=ids, texts=cat("texts"), logprobs=cat("lps"),
        rescored={k: [r[k] for r in rescored] for k in (rescored[0] if rescored else {})},
        step=tr.step, epoch=tr.stream.epoch, world_size=tr.backend.world_size,
        target_groups=tr.cfg.train.prompts_per_step,
        decode=lambda ids: tr.processor.tokenizer.decode(ids, skip_special_tokens=False))
    return batch, (lo, lo + counts[tr.backend.rank])


def _adv_stats(adv: torch.Tensor, lengths: torch.Tensor) -> Dict[str, float]:
    if adv.dim() == 2:  # per token: statistics over real tokens only
        valid = torch.arange(adv.shape[1])[None, :] < lengths[:, None]
        adv = adv[valid]
    return {"adv/mean": float(adv.mean()) if adv.numel() else 0.0,
            "adv/std": float(adv.std()) if adv.numel() > 1 else 0.0,
            "adv/zero_frac": float((adv.abs() < 1e-8).float().mean()) if adv.numel() else 0.0}


def train_step(tr: StepContext) -> Dict[str, float]:
    """One step on context ``tr``; returns the step's (global) metrics. The caller counts the step."""
    cfg, be, spec = tr.cfg, tr.backend, tr.spec
    t0, epoch0 = time.perf_counter(), tr.stream.epoch
    si, trajs = tr.rollout(tr.stream.next(cfg.train.prompts_per_step))
    comps, total = tr.rewards(si, trajs)
    n_global, skipped = be.all_reduce([len(trajs), len(si.skipped)])
    metrics: Dict[str, float] = {"skipped_samples": skipped, "resample_rounds": 0.0, "ranks": float(be.world_size)}
    metrics.update(record_step_skips(tr, si.skipped))  # skipped.jsonl; never drawn again
    if n_global == 0:
        return {**metrics, "time/step": time.perf_counter() - t0}
    if not trajs:
        from mmrl.errors import MMRLError

        raise MMRLError(f"rank {be.rank} has no trajectories at step {tr.step} (all its samples were skipped) while "
                        f"other ranks do; raise train.prompts_per_step or fix the data")
    rescore(tr, si, trajs)
    batch, (lo, hi) = gather_batch(tr, trajs, comps, total)
    rounds = 0
    while True:
        out = spec.advantages(batch)
        sel = spec.select(batch, out)
        if sel.resample <= 0 or rounds >= spec.max_resample_rounds():
            break
        rounds += 1
        si2, trajs2 = tr.rollout(tr.stream.next(sel.resample), group_offset=int(batch.groups["prompt"].max()) + 1)
        comps2, total2 = tr.rewards(si2, trajs2)
        si, trajs = merge_step_inputs(si, trajs, si2, trajs2)
        # a rank may draw no prompt of a small resampling round (its shard is empty): nothing to append then
        comps = {k: torch.cat([comps[k], comps2[k]]) if k in comps2 else comps[k] for k in comps}
        total = torch.cat([total, total2])
        rescore(tr, si, trajs)
        batch, (lo, hi) = gather_batch(tr, trajs, comps, total)
    metrics.update(record_step_skips(tr, si.skipped))  # those of the resampling rounds
    log_trajectories(tr, si, trajs)  # multi-turn runs: <out_dir>/trajectories.jsonl (mmrl rectify reads it)
    t1 = time.perf_counter()
    adv = out.advantages.float()
    train_idx = sel.train_mask[lo:hi].nonzero().flatten().tolist()
    inputs = [r.inputs for r in si.requests]
    t_trajs = [trajs[i] for i in train_idx]
    items = [t.scoring_item(inputs) for t in t_trajs]
    fallback = trajs[0].scoring_item(inputs)
    needs = spec.needs()
    ref_lps = be.score(items, reference=True, fallback=fallback) if (cfg.algorithm.kl_coef > 0 or needs.ref) else None
    # π_old: the trainer's log-probs before the update (decoupled PPO; the rollout correction compares them with the
    # sampler's, mmrl.train.correction); ppo_epochs = 1 without batch normalisation takes them from the update itself
    rc = cfg.algorithm.rollout_correction
    use_old = cfg.algorithm.ppo_epochs > 1 or needs.old
    prox_lps = be.score(items, fallback=fallback) if (use_old or (rc.mode != "none" and rc.batch_normalize)) else None
    old_lps = prox_lps if use_old else None
    masks = [t.loss_mask for t in t_trajs]
    corr = Correction(rc, [t.logprobs for t in t_trajs], prox_lps)
    if rc.mode != "none" and rc.batch_normalize:
        corr.norm = batch_norm_factor(be, rc, prox_lps, corr.behav, masks)
    t2 = time.perf_counter()
    upd: Dict[str, float] = {}
    local_adv = adv[lo:hi][train_idx]
    for _ in range(cfg.algorithm.ppo_epochs):
        upd = policy_update(be, t_trajs, inputs, local_adv, cfg.algorithm, cfg.train.micro_batch, old_lps, ref_lps,
                            fallback=trajs[0], correction=corr)
    upd = {**upd, **step_metrics(be, corr, masks)}
    be.scheduler_step()
    be.sync_rollout_weights(tr.engine)
    t3 = time.perf_counter()
    after = spec.after_step(batch, sel, tr.stream.epoch != epoch0)
    n = len(batch)
    gen_tokens = float(batch.lengths.sum())
    truncated, n_prompts, prompt_tokens, ent_sum, ent_tokens = be.all_reduce(
        [sum(t.truncated for t in trajs), len(si.requests), sum(r.inputs.num_tokens for r in si.requests),
         *entropy_sums(trajs)])
    shaped = out.rewards if out.rewards is not None else batch.rewards
    metrics.update({f"reward/{k}": float(v.float().mean()) for k, v in batch.components.items()})
    for loop_metrics in tr.loop.metrics:  # the loop's own (tools, stream); multi-turn: one rank
        metrics.update(loop_metrics(trajs))
    metrics.update(_mean_over_ranks(be, view_metrics(trajs, si, tr.abstain_text)))
    metrics.update({
        "reward/total": float(shaped.float().mean()), **_adv_stats(adv, batch.lengths), "resample_rounds": float(rounds),
        "train_frac": float(sel.train_mask.float().mean()), "entropy": ent_sum / max(ent_tokens, 1.0),
        "response_len": gen_tokens / n, "truncated_frac": truncated / n,
        # the work a step does: every distinct (media, prompt) is prefilled and scored once, each response decoded
        # and scored once (mmrl.models.scoring); step cost scales with their sum where compute dominates
        "work/prompts": n_prompts, "work/prompt_tokens": prompt_tokens, "work/response_tokens": gen_tokens,
        "tokens_per_s": gen_tokens / max(t1 - t0, 1e-9), "lr": be.lr(),
        "time/rollout": t1 - t0, "time/scoring": t2 - t1, "time/update": t3 - t2, "time/step": t3 - t0,
        "time/decode": si.time_decode, "time/views": si.time_views,
        "view_time_share": si.time_views / max(t3 - t0, 1e-9),
        **upd, **{f"algo/{k}": float(v) for k, v in {**out.metrics, **sel.metrics, **after}.items()
                  if isinstance(v, (int, float))},
    })
    if tr.details is not None:
        tr.details.update(step_details(si, trajs, batch, adv, lo, tr.detail_samples))
    return metrics


def _mean_over_ranks(be, metrics: Dict[str, float]) -> Dict[str, float]:
    parts: List[Dict[str, float]] = be.gather({k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})
    keys = sorted({k for p in parts for k in p})
    return {k: sum(p[k] for p in parts if k in p) / sum(1 for p in parts if k in p) for k in keys}
