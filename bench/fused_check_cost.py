"""What the fused decode's self-check (``mmrl.models.fused_decode.self_check``) costs, against one decode step.

    OMP_NUM_THREADS=1 .venv/bin/python bench/fused_check_cost.py [--models tiny real3b] [--reps 5]

The check runs once per model, dtype and device, when the HF engine first builds its decoder. Models: ``tiny`` (the
embedded tiny Qwen2.5-VL: hidden 128, 2 layers) and ``real3b`` (Qwen2.5-VL-3B's text widths: hidden
2048, 16 heads / 2 KV heads, MLP 11008, vocabulary 151936, at text depth 2; vision 1 block; random init). Printed
per model, CPU seconds of this process (median of ``--reps``): the whole check (``fused_decode.verdict`` uncached:
each form of ``GQA_FORMS`` until one passes; its verdict too), one fused decode step
of the check's own size (2 rows) and one decode step of ``bench/decode_speed.py``'s batch (16 prompts x 8 samples
= 128 rows over a 96-column cache: the fused step, the LM head and the log-softmax), and the check over each.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

REAL3B = dict(text_hidden=2048, text_heads=16, text_kv_heads=2, text_intermediate=11008, vocab_size=151936,
              text_layers=2, vision_hidden=1280, vision_heads=16, vision_intermediate=3420, vision_layers=1,
              fullatt_block_indexes=[0], mrope_section=[16, 24, 24], rope_theta=1e6, max_positions=32768)


def build(name: str):
    from mmrl.models.loading import load_model
    from mmrl.models.tiny import TinySpec, build_model, ensure_tiny_model

    if name == "tiny":
        return load_model(str(ensure_tiny_model()))
    return build_model(TinySpec(**REAL3B))[0]


def cpu(fn, reps: int) -> float:
    out = []
    for _ in range(reps):
        c = time.process_time()
        fn()
        out.append(time.process_time() - c)
    return statistics.median(out)


def measure(name: str, reps: int) -> tuple:
    import torch

    from mmrl.models.compat import output_cache
    from mmrl.models import fused_decode
    from mmrl.models.fused_decode import TextDecoder, verdict
    from mmrl.models.kv_cache import growing_cache
    from mmrl.models.scoring import backbone

    model = build(name).eval()
    core, head = backbone(model)
    dec = TextDecoder(TextDecoder.text_stack(core))

    def check():  # the whole check: each form of GQA_FORMS until one passes, uncached
        fused_decode._VERDICTS.clear()
        return verdict(core, dec)

    why = check()  # the first call, untimed: allocations of a fresh process
    seconds = cpu(check, reps)
    V, hid = dec.lm.config.vocab_size, dec.lm.config.hidden_size

    def step(rows: int, cols: int, with_head: bool):
        """Seconds of one decode step of ``rows`` rows over a ``cols``-column cache (fresh copies per repetition)."""
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            ids = torch.randint(0, V, (1, cols), generator=g)
            prefill = output_cache(core(input_ids=ids, use_cache=True))
        owner = torch.zeros(rows, dtype=torch.long)
        tok = torch.randint(0, V, (rows,), generator=g)
        mask = torch.ones((rows, 1, 1, cols + 1), dtype=torch.bool)
        times = []
        for _ in range(reps):
            cache = growing_cache(prefill, owner, cols + 1)
            with torch.no_grad():
                c = time.process_time()
                h = dec.step(tok, torch.full((rows,), cols), cache, mask)
                if with_head:
                    torch.log_softmax(head(h).float(), dim=-1)
                times.append(time.process_time() - c)
        return statistics.median(times)

    small, big = step(2, 6, False), step(128, 96, True)
    form = "transformers' forward" if why else f"fused ({dec.gqa})"
    print(f"[fused_check_cost] {name}: check {seconds:.4f} s ({why or form}), 2-row step {small:.5f} s, "
          f"128-row step {big:.4f} s", flush=True)
    return name, hid, V, seconds, form, small, big


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["tiny", "real3b"], choices=["tiny", "real3b"])
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    import torch
    import transformers

    torch.set_num_threads(1)
    rows = [measure(m, a.reps) for m in a.models]
    lines = [f"Self-check of the fused decode, transformers {transformers.__version__}, 1 thread, CPU seconds "
             f"(median of {a.reps}).", "",
             "| model | hidden | vocabulary | verdict | check s | 2-row step s | check / 2-row step | "
             "128-row step s (with head) | check / 128-row step |", "|---|---|---|---|---|---|---|---|---|"]
    for name, hid, V, check, form, small, big in rows:
        lines.append(f"| {name} | {hid} | {V} | {form} | {check:.4f} | {small:.5f} | {check / small:.1f} | "
                     f"{big:.4f} | {check / big:.2f} |")
    table = "\n".join(lines)
    print("\n" + table)
    return table


if __name__ == "__main__":
    main()
