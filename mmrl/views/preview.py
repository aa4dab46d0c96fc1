"""Contact sheet of a sample's views: one row per view (name, role, expected answer), one column per frame."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import torch
from PIL import Image, ImageDraw, ImageFont

from mmrl.data.schema import LETTERS, Sample, View
from mmrl.views.transforms import pixels

LABEL_W, PAD, HEADER_LINE = 190, 4, 14
BG, FG, DIM = (255, 255, 255), (0, 0, 0), (110, 110, 110)


def _to_pil(frame: torch.Tensor, cell: int) -> Image.Image:
    x = frame.detach().cpu()
    if x.shape[0] == 1:
        x = x.expand(3, -1, -1)
    img = Image.fromarray(x[:3].permute(1, 2, 0).contiguous().numpy())
    h, w = x.shape[-2:]
    return img.resize((max(1, round(w * cell / h)), cell), Image.NEAREST)


def _pick(n: int, max_frames: int) -> List[int]:
    if n <= max_frames:
        return list(range(n))
    return torch.linspace(0, n - 1, max_frames).round().long().tolist()


def make_contact_sheet(views: List[View], sample: Sample, out_png, cell: int = 96, max_frames: int = 16,
                       candidates: Optional[List[str]] = None) -> Image.Image:
    """Write a PNG of every view's frames labelled with view name, role and expected answer (not written when
    ``out_png`` is None: TensorBoard's and W&B's contact sheets); return the image.

    ``candidates`` (e.g. ``viewset.candidates_for(sample)``) are listed in the header; the sample's by default.
    Frames beyond ``max_frames`` are subsampled evenly; each frame shows its timestamp.
    """
    font = ImageFont.load_default()
    cands = candidates if candidates is not None else sample.candidates
    header = [f"{sample.id} [{sample.qtype}]: {sample.question}"[:160],
              "  ".join(f"({LETTERS[i]}) {c}" for i, c in enumerate(cands))[:160],
              f"gold: {sample.answer_letter} ({sample.answer})" if sample.is_choice else f"gold: {sample.answer}"[:160]]
    rows = []
    for v in views:
        x = pixels(v.media)
        idx = _pick(x.shape[0], max_frames)
        ts = v.media.timestamps if v.media.is_video else None
        tiles = [(_to_pil(x[i], cell), None if ts is None else ts[i]) for i in idx]
        rows.append((v, tiles))
    row_w = max((sum(t.width + PAD for t, _ in tiles) for _, tiles in rows), default=cell)
    width = LABEL_W + row_w + PAD
    head_h = HEADER_LINE * len(header) + PAD * 2
    row_h = cell + HEADER_LINE + PAD
    sheet = Image.new("RGB", (max(width, 420), head_h + row_h * len(rows)), BG)
    draw = ImageDraw.Draw(sheet)
    for k, line in enumerate(header):
        draw.text((PAD, PAD + k * HEADER_LINE), line, fill=FG, font=font)
    for r, (v, tiles) in enumerate(rows):
        y = head_h + r * row_h
        exp = "unknown" if v.expected is None else v.expected
        if exp in LETTERS[: len(cands)] and len(exp) == 1:
            exp = f"{exp} ({cands[LETTERS.index(exp)]})"
        for k, line in enumerate([v.name, f"role: {v.role}", f"expected: {exp}", f"transform: {v.transform}"]):
            draw.text((PAD, y + k * HEADER_LINE), line[:30], fill=FG if k == 0 else DIM, font=font)
        x0 = LABEL_W
        for tile, t in tiles:
            sheet.paste(tile, (x0, y))
            if t is not None:
                draw.text((x0 + 2, y + cell + 1), f"t={t:.2f}", fill=DIM, font=font)
            x0 += tile.width + PAD
    if out_png is not None:
        Path(out_png).parent.mkdir(parents=True, exist_ok=True)
        sheet.save(out_png)
    return sheet
