"""What one step of a run will do, from the config alone (``mmrl train --dry-run``): responses per view role and
the model passes per step, as the algorithm's hooks (``plan``, ``needs``) and the config decide them."""
from __future__ import annotations

import math
from typing import List

from mmrl.advice import advice
from mmrl.algos.spec import build_algorithm
from mmrl.errors import ConfigError
from mmrl.rollout.agent_loop_tools import check_rollout_config


def describe_plan(cfg) -> List[str]:
    """Lines describing the step; raises ``ConfigError`` where the algorithm rejects the config (e.g. ``rollout.n``)."""
    spec = build_algorithm(cfg.algorithm, cfg)
    n, p = cfg.rollout.n, cfg.train.prompts_per_step
    lines = [f"algorithm: {spec.describe()}", f"loss: {cfg.algorithm.loss} (agg {cfg.algorithm.loss_agg}, "
             f"kl_coef {cfg.algorithm.kl_coef}, ppo_epochs {cfg.algorithm.ppo_epochs})"]
    for param, source in getattr(getattr(type(spec), "Params", None), "DERIVED", {}).items():
        lines.append(f"algorithm.params.{param} = {cfg.algorithm.params.get(param)} (follows {source} unless set)")
    per_prompt = n
    if cfg.algorithm.viewset:
        from mmrl.views import ViewSet

        vs = ViewSet.load(cfg.algorithm.viewset, abstain_text=cfg.data.prompt.abstain_text)
        vs.check_weights_used(cfg.algorithm.name, spec.uses_view_weights)
        check_views_fit(spec, n, vs)
        counts = []
        for qtype, views in sorted(vs.qtypes.items()):
            plan = [(v.name, v.role, spec.plan(v.role, n, len(views))) for v in views]
            counts.append(sum(k for _, _, k in plan))
            lines.append(f"responses per prompt [{qtype}]: " + ", ".join(f"{name} ({role}) {k}" for name, role, k in plan)
                         + f" = {counts[-1]}")
        per_prompt = max(counts) if counts else n
    else:
        lines.append(f"responses per prompt: {spec.plan('anchor', n, 1)} (role anchor)")
    needs = spec.needs()
    passes = ["generate"] + [f"re-score under '{k}' ({v.describe()})" for k, v in needs.rescore.items()]
    if cfg.algorithm.kl_coef > 0 or needs.ref:
        passes.append("reference log-probs")
    rc = cfg.algorithm.rollout_correction
    if cfg.algorithm.ppo_epochs > 1 or needs.old or (rc.mode != "none" and rc.batch_normalize):
        passes.append("old log-probs")
    passes.append(f"actor forward+backward x {cfg.algorithm.ppo_epochs}")
    lines.append("passes per step: " + ", ".join(passes))
    lines.append(correction_line(rc))
    lines.append(check_rollout_config(cfg.rollout))  # a bad loop name or tool suite is a ConfigError here
    if cfg.rollout.engine == "hf":
        from mmrl.models.scoring import strategy_note

        lines.append(strategy_note(per_prompt, cfg.rollout.max_new_tokens))
    rounds = spec.max_resample_rounds()
    if rounds:
        lines.append(f"resampling: up to {rounds} extra rounds per step (the spec's select asks for more prompts)")
    k = cfg.rollout.asynchronous.max_staleness
    lines.append("rollouts: synchronous, in the trainer" if k == 0 else
                 f"rollouts: asynchronous, a worker process draws step s's batch from the weights after max(0, s - {k}) "
                 f"updates (rollout.asynchronous.max_staleness {k}), seeded"
                 + (", resampling rounds drawn in the trainer" if rounds else ""))
    lines.append(f"{cfg.train.steps} steps x {p} prompts x <= {per_prompt} responses = "
                 f"<= {cfg.train.steps * p * per_prompt} trajectories; backend {cfg.train.backend}, engine {cfg.rollout.engine}")
    return lines


def check_views_fit(spec, n: int, viewset) -> None:
    """``rollout.n`` suits every question type of the view set, or one ``ConfigError`` naming each qtype's view count
    and a value that suits them all: the smallest multiple >= n of their least common multiple that the
    algorithm's ``plan`` accepts for every qtype (5 and 2 views -> rollout.n=10), not one qtype's fix at a time."""
    sizes = {q: len(views) for q, views in sorted(viewset.qtypes.items())}

    def fits(m: int) -> bool:
        try:
            for q, views in viewset.qtypes.items():
                for v in views:
                    spec.plan(v.role, m, sizes[q])
        except ConfigError:
            return False
        return True

    if fits(n):
        return
    lcm = math.lcm(*sizes.values())
    first = lcm * max(1, -(-n // lcm))
    fit = next((m for m in range(first, first + 8 * lcm, lcm) if fits(m)), None)
    counts = ", ".join(f"{q}: {k}" for q, k in sizes.items())
    hint = f"; e.g. {advice('bpo_rollout_n', n=fit)} (a multiple of {lcm}, the least common multiple)" if fit else ""
    raise ConfigError(f"config key 'rollout.n' = {n} does not suit the views per sample of every question type in "
                      f"view set '{viewset.name}' ({counts}): algorithm {spec.name!r} spreads rollout.n over a sample's "
                      f"views{hint}")


def correction_line(rc) -> str:
    """Whether the rollout correction is on and how (docs/rollout_correction.md); the mismatch is logged either way."""
    if rc.mode == "none":
        return ("rollout correction: off (algorithm.rollout_correction.mode: none); the sampler/trainer mismatch is "
                "still logged (mismatch/*)")
    band = (f"weights outside [{rc.threshold_low}, {rc.threshold}] set to 0" if rc.mode.endswith("_mask")
            else f"weights truncated at {rc.threshold}")
    return (f"rollout correction: on, {rc.mode} ({band}{', batch-normalised' if rc.batch_normalize else ''}); "
            f"mismatch/* and rollout_corr/* logged every step")
