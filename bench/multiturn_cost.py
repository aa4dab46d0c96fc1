"""Cost of a multi-turn step against a single-turn step at equal generated tokens, on the tiny model (CPU).

    OMP_NUM_THREADS=1 .venv/bin/python bench/multiturn_cost.py [--turns 2 3 4] [--per-turn 8 32 64] [--seeds 0 1 2]

Three prompts (two 4-frame videos, one image: ``tests/support.py``'s mixed batch) x ``n`` episodes, greedy (a random
model never stops early, so every arm generates exactly ``turns * per_turn`` model tokens per episode; checked).
A step here is the rollout plus one scoring forward+backward over its trajectories (``response_logprobs``, the
policy-update pass); rewards and the optimizer step cost the same in every arm and are left out. Arms, side by side
in one process for each (turns, per-turn tokens, seed):

- ``single``: one turn of ``turns * per_turn`` tokens (the shared-prompt fast path for generation and scoring).
- ``single+obs``: the same, with the multi-turn arm's observations (text and videos) already in the prompt: the
  same context and media, no turn structure.
- ``multi reuse``: ``turns`` turns of ``per_turn`` tokens, a scripted environment answering each turn but the
  last with a new 4-frame 56x56 video (seeded per episode, turn and seed); each episode keeps its KV cache across
  turns (``mmrl.rollout.hf_turns``).
- ``multi full``: the same episodes re-prefilling their whole sequence every turn (``reuse_cache=False``).

Turn overhead = 1 - t(single) / t(multi): the share of the multi-turn step that a single-turn step of equal
generated tokens does not spend (observations included); against ``single+obs`` it is the cost of the turns alone.
Times are CPU seconds of this process (one torch thread; on a shared box wall times scatter with the load), the
best of ``--repeats`` runs; the table gives mean [95% t-interval] over seeds and the per-seed values.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

ARMS = ("single", "single+obs", "multi reuse", "multi full")


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--per-turn", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "multiturn_cost.md"))
    a = ap.parse_args(argv)

    import torch

    from bpo_table import ci95, fmt_ci
    from mmrl.data.schema import Media
    from mmrl.media.inputs import encode_texts
    from mmrl.models.loading import load_model, load_processor
    from mmrl.models.scoring import response_logprobs
    from mmrl.models.tiny import ensure_tiny_model
    from mmrl.rollout.agent_loop import Environment, Observation, build_agent_loop
    from mmrl.rollout.agent_loop_multi import observation_text, sequence_inputs
    from mmrl.data.schema import Segment
    from mmrl.rollout.base import RolloutRequest, SamplingParams, build_engine
    from support import mixed_requests

    torch.set_num_threads(1)

    def clip(seed: int, episode: int, k: int) -> Media:
        g = torch.Generator().manual_seed(seed * 100_003 + episode * 101 + k)
        return Media("obs", frames=torch.randint(0, 255, (4, 3, 56, 56), dtype=torch.uint8, generator=g),
                     timestamps=[0, .5, 1, 1.5], fps=2.0)

    def observation(seed, episode, k):
        return Observation(f"Here is part {k}.", media=clip(seed, episode, k))

    def env_factory(seed):
        count = [0]

        class Clips(Environment):
            def reset(self, sample, media):
                self.i, self.k = count[0], 0
                count[0] += 1

            def step(self, text):
                self.k += 1
                return observation(seed, self.i, self.k)

        return Clips

    path = str(ensure_tiny_model())
    proc, model = load_processor(path), load_model(path)
    engine = build_engine("hf", model=model, processor=proc)
    pad = proc.tokenizer.pad_token_id

    def with_observations(reqs, seed, turns):
        """Each episode's prompt followed by the observations the multi-turn arm shows it (one request per episode)."""
        out, i = [], 0
        for r in reqs:
            for _ in range(r.n):
                obs = [observation(seed, i, k) for k in range(1, turns)]
                segs = [Segment("env", e.input_ids, mm_token_type_ids=e.mm_token_type_ids, vision=e.vision, media=o.media)
                        for o, e in zip(obs, encode_texts(proc, [observation_text(proc, o) for o in obs],
                                                          [o.media for o in obs]))]
                out.append(RolloutRequest(inputs=sequence_inputs(r.inputs, segs, for_scoring=False), n=1,
                                          sample_id=r.sample_id, group_id=r.group_id))
                i += 1
        return out

    def best(fn):
        times, out = [], None
        for _ in range(a.repeats):
            torch.manual_seed(0)
            t0 = time.process_time()  # CPU seconds of this process (1 thread): robust to a shared, loaded box
            out = fn()
            times.append(time.process_time() - t0)
        return min(times), out

    def measure(loop, reqs, params):
        t_roll, trajs = best(lambda: loop.run(engine, reqs, params))
        items = [t.scoring_item([r.inputs for r in reqs]) for t in trajs]

        def score():
            lps = response_logprobs(model, items, micro_batch=16, pad_id=pad)
            sum((lp * t.loss_mask).sum() for lp, t in zip(lps, trajs)).backward()
            model.zero_grad(set_to_none=True)

        t_score, _ = best(score)
        return t_roll, t_score, sum(int(t.loss_mask.sum()) for t in trajs)

    results = {}  # (turns, per_turn) -> arm -> list over seeds of (rollout s, score s)
    for turns in a.turns:
        for per_turn in a.per_turn:
            for seed in a.seeds:
                reqs = mixed_requests(proc, lambda i: a.n, lambda i: "What colour is the square?")
                one = SamplingParams(max_new_tokens=turns * per_turn, greedy=True)
                each = SamplingParams(max_new_tokens=per_turn, greedy=True)
                single = build_agent_loop("single_turn")
                runs = {
                    "single": measure(single, reqs, one),
                    "single+obs": measure(single, with_observations(reqs, seed, turns), one),
                    "multi reuse": measure(build_agent_loop("multi_turn", processor=proc, env_factory=env_factory(seed),
                                                            max_turns=turns), reqs, each),
                    "multi full": measure(build_agent_loop("multi_turn", processor=proc, env_factory=env_factory(seed),
                                                           max_turns=turns, reuse_cache=False), reqs, each),
                }
                tokens = {arm: r[2] for arm, r in runs.items()}
                if len(set(tokens.values())) != 1:
                    raise SystemExit(f"unequal generated tokens at turns={turns} per_turn={per_turn}: {tokens}")
                for arm, (tr, ts, _) in runs.items():
                    results.setdefault((turns, per_turn), {}).setdefault(arm, []).append((tr, ts))
                step = {arm: tr + ts for arm, (tr, ts, _) in runs.items()}
                print(f"turns={turns} per_turn={per_turn} seed={seed}: " +
                      ", ".join(f"{arm} {tr:.3f}+{ts:.3f}s" for arm, (tr, ts, _) in runs.items()), flush=True)
    table = render(results, a, fmt_ci, ci95)
    print(table)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(table + "\n")
    return table


def render(results, a, fmt_ci, ci95) -> str:
    def secs(xs):
        m, lo, hi = ci95(xs)
        return f"{m:.3f}" if lo != lo else f"{m:.3f} [{lo:.3f}, {hi:.3f}]"

    cmd = "OMP_NUM_THREADS=1 .venv/bin/python bench/multiturn_cost.py " + " ".join(
        [f"--turns {' '.join(map(str, a.turns))}", f"--per-turn {' '.join(map(str, a.per_turn))}",
         f"--seeds {' '.join(map(str, a.seeds))}", f"--n {a.n}", f"--repeats {a.repeats}"])
    lines = [f"Command: `{cmd}`", "",
             f"Tiny Qwen2.5-VL on CPU (1 thread), 3 prompts x {a.n} episodes, greedy; step = rollout + scoring "
             f"forward+backward, in CPU seconds; best of {a.repeats} runs; mean [95% t-interval] over {len(a.seeds)} seeds.", "",
             "| turns | tokens/turn | step s: single | single+obs | multi reuse | multi full | "
             "step turn overhead: reuse (%) | full re-prefill (%) | rollout turn overhead: reuse (%) | "
             "full re-prefill (%) | step: reuse vs single+obs (%) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    per_seed = ["", "Per seed (turn overhead with reuse, %; step CPU seconds single / multi reuse / multi full):", "",
                "| turns | tokens/turn | " + " | ".join(f"seed {s}" for s in a.seeds) + " |",
                "|---|---|" + "---|" * len(a.seeds)]
    for (turns, per_turn), arms in results.items():
        step = {arm: [tr + ts for tr, ts in v] for arm, v in arms.items()}
        ovh = lambda arm, base="single": [1 - b / m for b, m in zip(step[base], step[arm])]
        rollout = {arm: [tr for tr, _ in v] for arm, v in arms.items()}
        share = lambda t, arm, base="single": [1 - b / m for b, m in zip(t[base], t[arm])]
        lines.append(f"| {turns} | {per_turn} | " + " | ".join(secs(step[arm]) for arm in ARMS) +
                     f" | {fmt_ci(share(step, 'multi reuse'))} | {fmt_ci(share(step, 'multi full'))} | "
                     f"{fmt_ci(share(rollout, 'multi reuse'))} | {fmt_ci(share(rollout, 'multi full'))} | "
                     f"{fmt_ci(share(step, 'multi reuse', 'single+obs'), signed=True)} |")
        ovh = lambda arm: share(step, arm)
        cells = [f"{100 * o:.1f} ({s:.2f} / {m:.2f} / {f:.2f})" for o, s, m, f in
                 zip(ovh("multi reuse"), step["single"], step["multi reuse"], step["multi full"])]
        per_seed.append(f"| {turns} | {per_turn} | " + " | ".join(cells) + " |")
    return "\n".join(lines + per_seed)


if __name__ == "__main__":
    main()
