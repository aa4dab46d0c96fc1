"""FastRL's offline pre-flight (issue 28): can MDAP's similarity test act on this world's responses at all?

MDAP (``mmrl.algos.fastrl.mdap_keep``, specs/algorithms.md §4) keeps a rollout only if its Jaccard distance
θ = 1 - |N_n(a) ∩ N_n(b)| / |N_n(a) ∪ N_n(b)| to every rollout already kept in its advantage partition is >= τ
(0.8). Two well-formed responses to one prompt with the same advantage say the same thing; if their wording is
also the same, θ is near 0 and MDAP reduces to "one rollout per partition" (advantage-only pruning). The audit
found θ <= 0.46 between well-formed responses of the single reasoning style: the similarity test could never act.

- ``style_distances``: per pair of reasoning styles (``mmrl.data.reasoning.STYLES``), θ between the same item's
  two well-formed targets, tokenised as the bench's model tokenises them, for n-gram sizes ``ngrams``. The
  similarity test can act on a pair of styles when θ >= τ for it.
- ``mdap_split``: on sampled rollouts, what MDAP keeps at τ against τ = 1 (one per partition): the share pruned by
  advantage alone, the share kept back by the similarity test, and the share of partitions where it kept > 1.

    OMP_NUM_THREADS=1 .venv/bin/python bench/fastrl_preflight.py [--model base] [--items 200] [--ngrams 1 2 3]
        [--tau 0.8] [--[no-]answer-first]

prints the style-distance table (no model forward: the tokenizer only).
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]


def style_distances(encode, items: Sequence[dict], styles: int, ngrams: Sequence[int] = (1,),
                    answer_first: bool = True) -> Dict[Tuple[int, int, int], List[float]]:
    """``{(n, style_a, style_b): [θ per item]}`` for every n in ``ngrams`` and pair of the first ``styles``
    styles; ``encode(text) -> token ids``."""
    from mmrl.algos.fastrl import jaccard_distance, ngram_set
    from mmrl.data.reasoning import reasoning_target

    out: Dict[Tuple[int, int, int], List[float]] = {}
    for it in items:
        ids = [encode(reasoning_target(it, answer_first, k)) for k in range(styles)]
        for n in ngrams:
            sets = [ngram_set(x, n) for x in ids]
            for a, b in itertools.combinations(range(styles), 2):
                out.setdefault((n, a, b), []).append(jaccard_distance(sets[a], sets[b]))
    return out


def mdap_split(adv, group_ids, responses, tau: float = 0.8, ngram: int = 1) -> Dict[str, float]:
    """What MDAP keeps at ``tau`` against advantage-only pruning (τ = 1: one rollout per partition), as shares of
    the ``N`` rollouts: ``pruned_by_advantage`` = 1 - kept(τ=1) / N, ``kept_by_similarity`` = (kept(τ) -
    kept(τ=1)) / N, ``partitions_similarity_acts`` = share of partitions with >= 2 rollouts where MDAP keeps > 1."""
    import torch

    from mmrl.algos.fastrl import advantage_partitions, mdap_keep

    n = int(adv.shape[0])
    if n == 0:
        return {"pruned_by_advantage": float("nan"), "kept_by_similarity": float("nan"),
                "partitions_similarity_acts": float("nan")}
    at_tau = mdap_keep(adv, group_ids, responses, tau, ngram)
    adv_only = mdap_keep(adv, group_ids, responses, 1.0, ngram)
    part = advantage_partitions(adv, group_ids)
    sizes = torch.bincount(part)
    kept = torch.bincount(part[at_tau], minlength=sizes.numel())
    multi = sizes >= 2
    acts = float((kept[multi] > 1).float().mean()) if bool(multi.any()) else float("nan")
    return {"pruned_by_advantage": 1.0 - int(adv_only.sum()) / n,
            "kept_by_similarity": (int(at_tau.sum()) - int(adv_only.sum())) / n,
            "partitions_similarity_acts": acts}


def distance_table(dist: Dict[Tuple[int, int, int], List[float]], tau: float) -> List[str]:
    lines = ["| n-gram | styles | θ min | θ median | share θ >= τ |", "|---|---|---:|---:|---:|"]
    for (n, a, b), xs in sorted(dist.items()):
        share = sum(1 for x in xs if x >= tau) / len(xs)
        lines.append(f"| {n} | {a} vs {b} | {min(xs):.3f} | {statistics.median(xs):.3f} | {100 * share:.1f}% |")
    return lines


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="base", help="whose tokenizer: base (default), tiny, or a path")
    ap.add_argument("--items", type=int, default=200, help="synthetic video world items (train split)")
    ap.add_argument("--styles", type=int, default=None, help="reasoning styles compared (default: all)")
    ap.add_argument("--ngrams", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--tau", type=float, default=0.8)
    ap.add_argument("--answer-first", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--out", default="runs/fastrl_preflight", help="where the world's annotations are written")
    args = ap.parse_args(argv)
    import json

    from mmrl.data.reasoning import STYLES
    from mmrl.data.synth_video import make_video_world
    from mmrl.demo import WORLD
    from mmrl.models.loading import load_processor

    model = args.model
    if model == "tiny":
        from mmrl.models.tiny import ensure_tiny_model

        model = ensure_tiny_model()
    tok = load_processor(model).tokenizer
    info = make_video_world(str(Path(args.out) / "world"), args.items, 1, seed=0, **WORLD)
    items = json.loads(Path(info["train"]).read_text())
    styles = args.styles or len(STYLES)
    dist = style_distances(lambda t: tok.encode(t, add_special_tokens=False), items, styles, args.ngrams,
                           args.answer_first)
    text = "\n".join([f"MDAP's similarity test on the reasoning styles ({len(items)} items, tokenizer of `{args.model}`, "
                      f"τ = {args.tau}; it can act on a pair of styles where θ >= τ):", ""]
                     + distance_table(dist, args.tau))
    print(text)
    return text


if __name__ == "__main__":
    main()
