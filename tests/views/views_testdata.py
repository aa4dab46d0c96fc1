"""Test media built directly as tensors: an 8-frame 56x56 clip at 2 fps whose source video was 112x112."""
from pathlib import Path

import torch

from mmrl.data.schema import Evidence, ImageRef, Media, Sample, VideoRef

VIEWS_DIR = Path(__file__).resolve().parents[2] / "views"


def make_clip(t=8, h=56, w=56, seed=0, sample_id="s1"):
    g = torch.Generator().manual_seed(seed)
    frames = torch.randint(1, 255, (t, 3, h, w), generator=g, dtype=torch.uint8)  # never 0: black is visible
    return Media(sample_id, frames=frames, timestamps=[0.5 * i for i in range(t)], source_size=(112, 112), fps=2.0)


def make_image(h=56, w=56, seed=0, sample_id="i1"):
    g = torch.Generator().manual_seed(seed)
    return Media(sample_id, image=torch.randint(1, 255, (3, h, w), generator=g, dtype=torch.uint8),
                 source_size=(112, 112))


def make_sample(qtype="direction", sample_id="s1", candidates=("left", "right", "up", "down"), answer="left",
                segments=((1.0, 2.0),), boxes=((0.2, [20, 40, 60, 80]), (3.1, [40, 40, 80, 80])), image=False):
    return Sample(id=sample_id, question="Which way does the ball move?", candidates=list(candidates), answer=answer,
                  qtype=qtype, video=None if image else VideoRef("clip.mp4"), image=ImageRef("x.png") if image else None,
                  evidence=Evidence(segments=list(segments), boxes=[(t, list(b)) for t, b in boxes],
                                    source_size=(112, 112)))

