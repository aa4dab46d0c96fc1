"""Cost of multi-turn episodes against single-turn rollouts at equal model tokens, on the tiny model (CPU).

    OMP_NUM_THREADS=1 .venv/bin/python bench/multiturn_cost.py [--turns 3] [--per-turn 8] [--n 4] [--repeats 3]

Three prompts (two 4-frame videos, one image: ``tests/support.py``'s mixed batch) x ``n`` samples, greedy.
``single_turn`` generates ``turns * per_turn`` tokens per sample in one call; ``multi_turn`` generates ``per_turn``
tokens per turn for ``turns`` turns, a scripted environment answering each turn but the last with a new 4-frame
video. Both arms generate the same number of model tokens (greedy on a random model never stops early); the
multi-turn arm also carries the inserted videos. Prints the best of ``repeats`` wall times of the rollout and of
one scoring forward+backward over the trajectories (``response_logprobs``), per arm, and their ratio.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--per-turn", type=int, default=8)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)

    import torch

    from mmrl.data.schema import Media
    from mmrl.models.loading import load_model, load_processor
    from mmrl.models.scoring import response_logprobs
    from mmrl.models.tiny import ensure_tiny_model
    from mmrl.rollout.agent_loop import Environment, Observation, build_agent_loop
    from mmrl.rollout.base import SamplingParams, build_engine
    from support import mixed_requests

    class Clips(Environment):
        def reset(self, sample, media):
            self.k = 0

        def step(self, text):
            self.k += 1
            g = torch.Generator().manual_seed(self.k)
            frames = torch.randint(0, 255, (4, 3, 56, 56), dtype=torch.uint8, generator=g)
            return Observation("Here.", media=Media("obs", frames=frames, timestamps=[0, .5, 1, 1.5], fps=2.0))

    path = str(ensure_tiny_model())
    proc, model = load_processor(path), load_model(path)
    engine = build_engine("hf", model=model, processor=proc)
    reqs = mixed_requests(proc, lambda i: a.n, lambda i: "What colour is the square?")
    prompts = [r.inputs for r in reqs]

    def best(fn):
        times, out = [], None
        for _ in range(a.repeats):
            torch.manual_seed(0)
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
        return min(times), out

    arms = [("single_turn", build_agent_loop("single_turn"), SamplingParams(max_new_tokens=a.turns * a.per_turn, greedy=True)),
            ("multi_turn", build_agent_loop("multi_turn", processor=proc, env_factory=Clips, max_turns=a.turns),
             SamplingParams(max_new_tokens=a.per_turn, greedy=True))]
    rows = []
    for name, loop, params in arms:
        t_roll, trajs = best(lambda: loop.run(engine, reqs, params))
        items = [t.scoring_item(prompts) for t in trajs]

        def score():
            lps = response_logprobs(model, items, micro_batch=16, pad_id=proc.tokenizer.pad_token_id)
            sum((lp * t.loss_mask).sum() for lp, t in zip(lps, trajs)).backward()
            model.zero_grad(set_to_none=True)

        t_score, _ = best(score)
        rows.append((name, len(trajs), sum(int(t.loss_mask.sum()) for t in trajs),
                     sum(int(t.response_ids.numel()) for t in trajs), t_roll, t_score))
    print("| arm | episodes | model tokens | response tokens (with observations) | rollout s | score fwd+bwd s | total s |")
    print("|---|---|---|---|---|---|---|")
    for name, n, gen, resp, tr, ts in rows:
        print(f"| {name} | {n} | {gen} | {resp} | {tr:.3f} | {ts:.3f} | {tr + ts:.3f} |")
    (_, _, _, _, r0, s0), (_, _, _, _, r1, s1) = rows
    print(f"multi_turn / single_turn: rollout {r1 / r0:.2f}x, scoring {s1 / s0:.2f}x, total {(r1 + s1) / (r0 + s0):.2f}x")


if __name__ == "__main__":
    main()
