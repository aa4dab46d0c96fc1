"""Cost of the scorer's strategies (forward + backward) by response length, side by side in one process.

    OMP_NUM_THREADS=1 .venv/bin/python bench/scoring_crossover.py [--lengths 4 8 16 32 64 256] [--reps 3]
                                                                  [--prompts 16] [--n 8] [--micro-batch 64]

The tiny Qwen2.5-VL, ``--prompts`` prompts (a 56x56 image and mmrl's prompt text, ~64 tokens) x ``--n`` random
responses of each length; one "update" = ``response_logprobs`` over all of them in micro-batches of
``--micro-batch`` with ``sum().backward()``. The strategies run round-robin (A B C A B C ...) so load hits them
alike; the table gives the median CPU seconds per update and which one ``scoring_strategy`` picks. Also checks
that every strategy's log-probs equal ``full``'s (max abs difference printed). This measurement sets
``mmrl.models.scoring.PACKED_MAX_EXTRA_KEYS``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def image_prompts(proc, k: int, seed: int = 0):
    from mmrl.data.schema import Media
    from mmrl.media.inputs import build_prompt_inputs
    from mmrl.media.prompts import build_messages

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(k):
        m = Media(str(i), image=torch.randint(0, 255, (3, 56, 56), dtype=torch.uint8, generator=g))
        q = "What colour is the square?" + " the" * (i % 5)
        out.append(build_prompt_inputs(proc, build_messages(q, ["red", "green", "blue", "yellow"], m), m))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[4, 8, 16, 32, 64, 256])
    ap.add_argument("--strategies", nargs="+", default=["packed", "expand", "full"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=64)
    ap.add_argument("--gen", action="store_true", help="time generation (the HF engine's decode layouts) instead")
    args = ap.parse_args(argv)
    if args.gen:
        return gen_table(args)

    from mmrl.models.loading import load_model, load_processor
    from mmrl.models.scoring import response_logprobs, scoring_strategy
    from mmrl.models.tiny import ensure_tiny_model

    path = str(ensure_tiny_model())
    proc, model = load_processor(path), load_model(path)
    model.train()
    prompts = image_prompts(proc, args.prompts)
    vocab = len(proc.tokenizer) - 20
    print(f"{args.prompts} prompts (~{statistics.mean(p.num_tokens for p in prompts):.0f} tokens) x {args.n} responses, "
          f"micro-batch {args.micro_batch}, {torch.get_num_threads()} thread(s); median CPU s per forward+backward "
          f"over {args.reps} reps\n")
    print("| new tokens | " + " | ".join(args.strategies) + " | auto picks | max abs dlogp vs full |")
    print("|---|" + "---|" * (len(args.strategies) + 2))
    g = torch.Generator().manual_seed(1)
    for L in args.lengths:
        items = [(p, torch.randint(0, vocab, (L,), generator=g)) for p in prompts for _ in range(args.n)]
        times = {s: [] for s in args.strategies}
        for _ in range(args.reps):
            for s in args.strategies:
                model.zero_grad(set_to_none=True)
                t = time.process_time()
                lps = response_logprobs(model, items, micro_batch=args.micro_batch, pad_id=proc.tokenizer.pad_token_id,
                                        strategy=s)
                torch.cat(lps).sum().backward()
                times[s].append(time.process_time() - t)
        with torch.no_grad():
            ref = torch.cat(response_logprobs(model, items, micro_batch=args.micro_batch, strategy="full",
                                              pad_id=proc.tokenizer.pad_token_id))
            diff = max(float((torch.cat(response_logprobs(model, items, micro_batch=args.micro_batch, strategy=s,
                                                          pad_id=proc.tokenizer.pad_token_id)) - ref).abs().max())
                       for s in args.strategies)
        pick = scoring_strategy(max(p.num_tokens for p in prompts), args.n, L)
        print(f"| {L} | " + " | ".join(f"{statistics.median(times[s]):.3f}" for s in args.strategies)
              + f" | {pick} | {diff:.1e} |", flush=True)


def gen_table(args) -> None:
    """Median CPU seconds of ``HFEngine.generate`` per layout (``--prompts`` x ``--n`` samples, T=1, no early EOS:
    the random tiny model rarely samples ``<|im_end|>``, so every sample runs to the length)."""
    from mmrl.models.loading import load_model, load_processor
    from mmrl.models.scoring import scoring_strategy
    from mmrl.models.tiny import ensure_tiny_model
    from mmrl.rollout.base import RolloutRequest, SamplingParams, build_engine

    path = str(ensure_tiny_model())
    proc, model = load_processor(path), load_model(path)
    prompts = image_prompts(proc, args.prompts)
    reqs = [RolloutRequest(inputs=p, n=args.n, sample_id=str(i), group_id=i) for i, p in enumerate(prompts)]
    layouts = [s for s in args.strategies if s != "full"]
    engines = {s: build_engine("hf", model=model, processor=proc, max_batch_sequences=args.prompts * args.n, layout=s)
               for s in layouts}
    print(f"generation: {args.prompts} prompts x {args.n} samples in one chunk, {torch.get_num_threads()} thread(s); "
          f"median CPU s per generate over {args.reps} reps\n")
    print("| new tokens | " + " | ".join(layouts) + " | auto picks | same tokens |")
    print("|---|" + "---|" * (len(layouts) + 2))
    for L in args.lengths:
        times, toks = {s: [] for s in layouts}, {}
        for _ in range(args.reps):
            for s in layouts:
                torch.manual_seed(0)
                t = time.process_time()
                out = engines[s].generate(reqs, SamplingParams(max_new_tokens=L))
                times[s].append(time.process_time() - t)
                toks[s] = [o.response_ids.tolist() for o in out]
        same = all(toks[s] == toks[layouts[0]] for s in layouts)
        pick = scoring_strategy(max(p.num_tokens for p in prompts), args.n, L)
        print(f"| {L} | " + " | ".join(f"{statistics.median(times[s]):.3f}" for s in layouts) + f" | {pick} | {same} |",
              flush=True)


if __name__ == "__main__":
    main()
