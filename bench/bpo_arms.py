"""The arms of ``bench/bpo_vs_grpo.py`` and what they cost: the built-in arms (config files and overrides over
``configs/demo.yaml``), the budget match of every BPO arm to a GRPO arm (generations per prompt, per question
type), the per-step costs, and the plain BPO / GRPO step ratio at a long response length."""
from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Dict, List

from _arms import Arm, log, step_round_robin
from bpo_table import ARM_LABEL
from bpo_world import add_abstain_option

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "configs" / "demo.yaml"
BPO_CFG = str(REPO / "configs" / "bpo_demo.yaml")
ARMS: Dict[str, List[str]] = {  # name -> config files over configs/demo.yaml, then dotted overrides ("k=v")
    "grpo": [],
    "grpo_g2": ["rollout.n=2"],
    "grpo_g32": ["rollout.n=32"],
    "tgrpo": [str(REPO / "configs" / "tgrpo_demo.yaml")],
    "bpo": [BPO_CFG],
    "bpo_p8": [BPO_CFG, "rollout.n=32"],  # BPO: packs = rollout.n / views = 8
    "bpo_anchor": [BPO_CFG, "rollout.n=2", f"algorithm.viewset={REPO / 'views' / 'bpo_anchor_only.yaml'}"],
}
MATCH = {"bpo": "grpo", "bpo_p8": "grpo_g32", "bpo_anchor": "grpo_g2"}  # BPO arm -> its budget-matched GRPO arm


def rollout_budget(arm: "Arm", samples) -> Dict[str, int]:
    """Generations per prompt, per question type, as the arm's trainer would request them (no generation)."""
    from mmrl.rollout.step_inputs import build_step_inputs

    tr = arm.trainer
    out = {}
    for s in samples:
        si = build_step_inputs([s], tr.processor, tr.cfg.data, tr.plan, tr.viewset)
        out[s.qtype] = sum(r.n for r in si.requests)
    return out


def step_costs(history: List[Dict[str, float]]) -> Dict[str, float]:
    steps = [h["time/step"] for h in history if "time/step" in h]
    views = sum(h.get("time/views", 0.0) for h in history)
    return {"median_step_s": statistics.median(steps) if steps else float("nan"), "total_step_s": sum(steps),
            "view_share": views / max(sum(steps), 1e-9),
            "rollout_s": statistics.median([h.get("time/rollout", 0.0) for h in history]) if history else 0.0,
            "update_s": statistics.median([h.get("time/update", 0.0) for h in history]) if history else 0.0,
            **{k: statistics.mean([h.get(f"work/{k}", 0.0) for h in history]) if history else 0.0
               for k in ("prompts", "prompt_tokens", "response_tokens")}}


def check_budgets(arms: Dict[str, "Arm"], budgets: Dict[str, Dict[str, int]]) -> None:
    """A BPO arm requests as many generations per prompt, on every question type, as its matched GRPO arm
    (``MATCH``; an extra BPO arm: any GRPO-family arm of the run)."""
    grpo_like = [n for n, a in arms.items() if a.cfg.algorithm.name == "grpo"]
    for n, a in arms.items():
        if a.cfg.algorithm.name != "bpo":
            continue
        refs = [MATCH[n]] if n in MATCH and MATCH[n] in arms else ([] if n in MATCH else grpo_like)
        if n in MATCH and not refs:
            continue  # its matched arm is not in this run
        if not any(budgets[n] == budgets[r] for r in refs):
            raise RuntimeError(f"arm {n} (BPO) matches no GRPO arm's budget {refs}: {budgets}")


def budgets_text(results: List[Dict]) -> str:
    arms = list(results[0]["costs"])
    def values(budget: Dict) -> set:  # per question type; a recovered record keeps the printed list
        return {x for v in budget.values() for x in (v if isinstance(v, list) else [v])}

    return "; ".join(f"{ARM_LABEL.get(a, a)}: " + "/".join(str(v) for v in sorted(set().union(*(values(r["budgets"][a]) for r in results))))
                     for a in arms)


def cost_at_length(args, out: Path) -> Dict:
    """Plain step ratio BPO (2x4) / GRPO (G=8) when responses run to ``args.cost_tokens`` tokens: the untrained tiny
    model (it rarely emits EOS), a fresh 32-clip world, ``args.cost_prompts`` prompts per step, 1 warm-up step then
    ``args.cost_steps`` timed steps per arm, round-robin."""
    from mmrl.config import load_config
    from mmrl.data.synth_video import make_video_world
    from mmrl.demo import WORLD
    from mmrl.models.tiny import ensure_tiny_model

    t0 = time.time()
    info = make_video_world(str(out / "world"), 32, 0, seed=0, **WORLD)
    tiny = ensure_tiny_model()
    base = load_config([str(DEMO)], list(args.overrides))
    train = out / "world" / "train_abst.json"
    add_abstain_option(info["train"], str(train), base.data.prompt.abstain_text)
    arms = {}
    for name in ("grpo", "bpo"):
        files = [i for i in ARMS[name] if "=" not in i]
        cfg = load_config([str(DEMO)] + files, [f"data.train={train}", f"model.path={tiny}", "train.seed=0",
                                                f"train.out_dir={out / name}", f"train.prompts_per_step={args.cost_prompts}",
                                                f"rollout.max_new_tokens={args.cost_tokens}", "train.save_every=0"]
                          + list(args.overrides))
        arms[name] = Arm(name, cfg, run_dir=True)
    for step in range(1 + args.cost_steps):
        step_round_robin(arms, step)
    h = {n: a.history[1:] for n, a in arms.items()}
    med = {n: statistics.median(m["time/step"] for m in hs) for n, hs in h.items()}
    wk = {n: statistics.mean(m["work/prompt_tokens"] + m["work/response_tokens"] for m in hs) for n, hs in h.items()}
    resp = {n: statistics.mean(m["response_len"] for m in hs) for n, hs in h.items()}
    res = {"max_new_tokens": args.cost_tokens, "prompts": args.cost_prompts, "steps": args.cost_steps,
           "grpo_s": med["grpo"], "bpo_s": med["bpo"], "step_ratio": med["bpo"] / med["grpo"],
           "work_ratio": wk["bpo"] / wk["grpo"], "grpo_resp": resp["grpo"], "bpo_resp": resp["bpo"],
           "minutes": (time.time() - t0) / 60}
    log(f"[cost] {args.cost_tokens}-token responses: BPO/GRPO step {res['step_ratio']:.2f}, work {res['work_ratio']:.2f} "
        f"({res['minutes']:.1f} min)")
    return res
