"""Why claim persistence sits near 1 in the claims world (README, PACG section; docs/pacg.md).

    .venv/bin/python bench/pacg_probe.py --checkpoint runs/pacg/sft/final --world runs/pacg/world [--limit 64]

Greedy responses on the held-out split, re-scored under VPPO's patch blackening and under ``full_mask``
(``mmrl.diagnose.core``). Per claim (``pacg_claims``; labelled by ``synth_claims.claim_support``) the retention
``R_t = min(1, e^{d_t})`` (``pacg_gate``) is averaged over the claim's *content* tokens (the colour / location word)
and over its *template* tokens; ``P_c`` is their token-weighted mean. Also: the share of claims with P_c > 0.99 and
the share the spec's z-gate (κ = 1, over all claims at once) would flag, per intervention.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]


def probe(checkpoint: str, world: str, config: str, limit: int = 0, max_new_tokens: int = 64) -> List[Dict]:
    """One row per claim: label, token counts, and per intervention P (claim), R content, R template."""
    import torch

    from mmrl.algos.pacg_claims import PERCEPTION_LEXICON, extract_claims
    from mmrl.algos.pacg_gate import log_ratio, retention_tokens
    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.data.synth_claims import claim_content, claim_support
    from mmrl.diagnose.core import intervened_logprobs
    from mmrl.models.loading import load_model, load_processor
    from mmrl.models.scoring import response_logprobs
    from mmrl.rollout.base import SamplingParams, build_engine
    from mmrl.rollout.step_inputs import build_step_inputs
    from mmrl.views.patch_transforms import FULL_MASK, VPPO_PATCH

    torch.set_num_threads(1)
    cfg = load_config([config], [])
    samples, _ = load_samples(str(Path(world) / "test.json"), world)
    samples = samples[:limit] if limit else samples
    model, proc = load_model(checkpoint), load_processor(checkpoint)
    model.eval()
    tok = proc.tokenizer
    decode = lambda ids: tok.decode(ids, skip_special_tokens=False)  # noqa: E731
    engine = build_engine("hf", model=model, processor=proc)
    rows: List[Dict] = []
    with torch.no_grad():
        for s in range(0, len(samples), 16):  # as diagnose_samples: same batches, seeds and re-scoring draws
            si = build_step_inputs(samples[s : s + 16], proc, cfg.data, lambda role, *_: 1, None, seed=0)
            torch.manual_seed(s)
            trajs = engine.generate(si.requests, SamplingParams(max_new_tokens=max_new_tokens, greedy=True))
            orig = response_logprobs(model, [(si.requests[t.inputs_key].inputs, t.response_ids) for t in trajs], 1.0,
                                     16, tok.pad_token_id)
            inter = {name: intervened_logprobs(model, proc, si, trajs, cfg.data, iv[0], iv[1], s)
                     for name, iv in (("patch", VPPO_PATCH), ("full", FULL_MASK))}
            for c in extract_claims(decode, [t.response_ids.tolist() for t in trajs], PERCEPTION_LEXICON, claim_content):
                t = trajs[c.row]
                content = [k for s_, e_ in c.content for k in range(s_, e_)]  # the colour / location word's tokens
                template = [k for k in range(c.tok_start, c.tok_end) if k not in content]
                row = {"supported": claim_support(c.text, si.samples[t.sample_id].meta),
                       "tokens": c.tok_end - c.tok_start, "content_tokens": len(content)}
                for name, lp in inter.items():
                    r = retention_tokens(log_ratio(lp[c.row], orig[c.row]))
                    row[f"P_{name}"] = float(r[c.tok_start : c.tok_end].mean())
                    row[f"R_content_{name}"] = float(r[content].mean()) if content else float("nan")
                    row[f"R_template_{name}"] = float(r[template].mean()) if template else float("nan")
                rows.append(row)
    return rows


def _mean(xs) -> str:
    xs = [x for x in xs if x == x]
    return f"{statistics.mean(xs):.3f}" if xs else "n/a"


def table(rows: List[Dict]) -> str:
    from mmrl.algos.pacg_gate import persistence_gate
    import torch

    lines = ["| claims | n | tokens (content) | intervention | P_c | R content | R template |", "|---|---|---|---|---|---|---|"]
    for label, sel in (("supported", True), ("unsupported", False)):
        rs = [r for r in rows if r["supported"] is sel]
        for name in ("patch", "full"):
            lines.append(f"| {label} | {len(rs)} | {_mean([r['tokens'] for r in rs])} ({_mean([r['content_tokens'] for r in rs])}) "
                         f"| {name} | {_mean([r[f'P_{name}'] for r in rs])} | {_mean([r[f'R_content_{name}'] for r in rs])} "
                         f"| {_mean([r[f'R_template_{name}'] for r in rs])} |")
    lines += ["", "| intervention | claims with P_c > 0.99 | flagged by the z-gate (κ = 1, all claims) | flagged among supported "
              "| among unsupported |", "|---|---|---|---|---|"]
    for name in ("patch", "full"):
        p = torch.tensor([r[f"P_{name}"] for r in rows], dtype=torch.float64)
        flagged = persistence_gate(p).flagged
        sup = torch.tensor([r["supported"] is True for r in rows], dtype=torch.bool)
        uns = torch.tensor([r["supported"] is False for r in rows], dtype=torch.bool)
        share = lambda m: f"{float(m.float().mean()):.3f}" if m.numel() else "n/a"  # noqa: E731
        lines.append(f"| {name} | {share(p > 0.99)} | {share(flagged)} | {share(flagged[sup])} | {share(flagged[uns])} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--world", required=True, help="claims world directory (test.json, images/)")
    p.add_argument("--config", help="run config with the data section (default: the checkpoint's run config.yaml)")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=64, help="above the SFT traces' 50 tokens")
    args = p.parse_args(argv)
    config = args.config or str(Path(args.checkpoint).resolve().parent / "config.yaml")
    out = table(probe(args.checkpoint, args.world, config, args.limit, args.max_new_tokens))
    print(out)
    return out


if __name__ == "__main__":
    main()
