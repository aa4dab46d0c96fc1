"""The data of ``bench/bpo_vs_grpo.py`` beyond the synthetic world itself: the abstention option appended to every
question, and the "nothing to see" SFT items that give the tiny model a prior for it."""
from __future__ import annotations

import json
from pathlib import Path


def add_abstain_option(src: str, dst: str, text: str) -> None:
    """Copy an annotation file with ``text`` appended as the last candidate of every question."""
    items = json.loads(Path(src).read_text())
    for it in items:
        if text.lower() not in {c.lower() for c in it["candidates"]}:
            it["candidates"] = list(it["candidates"]) + [text]
    Path(dst).write_text(json.dumps(items, indent=1) + "\n")


def add_null_sft_items(train: str, dst: str, share: float, text: str, world: Path, seed: int,
                       clip_world: dict = None) -> int:
    """Write the SFT data: ``train`` plus ``round(share * len(train))`` "nothing to see" items whose clip is the
    world's empty background (no squares) and whose answer is the abstention option. Returns their count.

    The tiny model has no prior for the abstention option; without a few such items it never samples it, and no
    arm (BPO included) can ever be rewarded for it. Every arm starts from this same SFT checkpoint. The RL arms
    train on ``train`` alone, and the eval's null view is a different canvas (uniform gray, ``gray`` transform).
    """
    import numpy as np

    from mmrl.data.synth_video import render, write_mp4
    from mmrl.demo import WORLD

    cw = clip_world or WORLD  # the empty clip's size, n_frames and fps (default: the demo's world)

    items = json.loads(Path(train).read_text())
    k = int(round(share * len(items)))
    if k:
        clip = "videos/empty.mp4"
        frames = np.stack([render([], cw["size"]) for _ in range(cw["n_frames"])])
        write_mp4(str(world / clip), frames, cw["fps"])
        rng = np.random.default_rng(seed)
        for j, i in enumerate(rng.choice(len(items), size=k, replace=False)):
            src = items[int(i)]
            items.append({"id": f"null-{j:05d}", "video": clip, "question": src["question"],
                          "candidates": src["candidates"], "answer": text, "qtype": src["qtype"],
                          "meta": {"null": True}})
    Path(dst).write_text(json.dumps(items, indent=1) + "\n")
    return k
