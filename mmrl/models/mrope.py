"""3-D M-RoPE positions of Qwen2-VL, Qwen2.5-VL and Qwen3-VL, numbered as the models were trained.

A sequence is read left to right in blocks; ``nxt`` is the running maximum position + 1 (``start`` before the first
block, so a multi-turn tail continues an existing sequence from its next position)::

    text token                       (nxt, nxt, nxt);                               nxt += 1
    media block, merged grid T x H x W (tokens in t, h, w order; H = h / merge, W = w / merge)
                                     (nxt + tau_k, nxt + i, nxt + j);  nxt += max(tau_{T-1}, H - 1, W - 1) + 1
    tau_k = floor(k * second_per_grid_t * tokens_per_second)   Qwen2.5-VL videos
          = k                                                  Qwen2-VL, and images (T = 1: tau = 0)

Qwen3-VL writes a video as one ``<t seconds><|vision_start|> frame <|vision_end|>`` block per temporal grid step
(time lives in the text), so its video grid ``(T, h, w)`` is read as ``T`` blocks ``(1, h, w)``.

Sources: Qwen's ``get_rope_index`` as released in ``transformers`` 4.49 (``st_idx = llm_pos_ids_list[-1].max() + 1``)
and vLLM 0.33's ``get_mrope_input_positions`` (``qwen2_vl.py``, ``qwen2_5_vl.py``, ``qwen3_vl.py``; ``tau`` in float64
then ``astype(int64)``, as here). ``transformers`` 5.3 .. 5.24 continue after a medium at ``start + max(H, W)``
instead, ignoring the temporal extent; 4.52 .. 5.17 also truncate ``second_per_grid_t`` to an integer before
multiplying. ``docs/positions.md`` has the releases and the offsets. Nothing here calls the model.
"""
from __future__ import annotations

import argparse
import contextlib
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

import torch

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


@dataclass(frozen=True)
class RopeRule:
    """What the numbering reads from a model config."""

    family: str  # qwen2_vl | qwen2_5_vl | qwen3_vl
    image_token_id: int
    video_token_id: int
    merge: int  # vision_config.spatial_merge_size
    tokens_per_second: float = 1.0  # Qwen2.5-VL: vision_config.tokens_per_second

    @classmethod
    def from_config(cls, config) -> "RopeRule":
        """From a (``Qwen2_5_VL``/``Qwen2VL``/``Qwen3VL``) model config; Qwen3-VL MoE numbers like Qwen3-VL."""
        kind = getattr(config, "model_type", "")
        family = "qwen3_vl" if kind.startswith("qwen3_vl") else kind
        if family not in FAMILIES:
            raise ValueError(f"M-RoPE positions: model_type {kind!r} is not one of {', '.join(FAMILIES)}")
        vision = config.vision_config
        tps = float(getattr(vision, "tokens_per_second", 1.0) or 1.0) if family == "qwen2_5_vl" else 1.0
        return cls(family, int(config.image_token_id), int(config.video_token_id),
                   int(vision.spatial_merge_size), tps)


def _grids(rule: RopeRule, image_grid_thw, video_grid_thw, second_per_grid_ts):
    """Iterators over ``(T, h, w, seconds per grid)`` of the images and of the videos (Qwen3-VL: one per frame)."""
    images = [(int(t), int(h), int(w), 1.0) for t, h, w in (image_grid_thw.tolist() if image_grid_thw is not None else [])]
    videos = []
    secs = second_per_grid_ts.view(-1).tolist() if second_per_grid_ts is not None else None
    for k, (t, h, w) in enumerate(video_grid_thw.tolist() if video_grid_thw is not None else []):
        if rule.family == "qwen3_vl":
            videos.extend([(1, int(h), int(w), 1.0)] * int(t))
        else:
            videos.append((int(t), int(h), int(w), float(secs[k]) if secs is not None else 1.0))
    return iter(images), iter(videos)


def _number(ids: torch.Tensor, rule: RopeRule, images: Iterator, videos: Iterator, start: int
            ) -> Tuple[torch.Tensor, int]:
    """Positions ``[3, L]`` of one sequence, consuming one grid per media block from ``images`` / ``videos``."""
    ids = ids.view(-1).cpu()
    L = ids.numel()
    out = torch.empty((3, L), dtype=torch.long)
    media = ((ids == rule.image_token_id) | (ids == rule.video_token_id)).nonzero().view(-1).tolist()
    nxt, st, m = int(start), 0, 0
    while m < len(media):
        off = media[m]
        is_video = int(ids[off]) == rule.video_token_id
        try:
            t, h, w, sec = next(videos if is_video else images)
        except StopIteration:
            raise ValueError(f"M-RoPE positions: more {'video' if is_video else 'image'} blocks in the token ids "
                             f"than grids given") from None
        H, W = h // rule.merge, w // rule.merge
        n = t * H * W
        if off + n > L or not bool((ids[off : off + n] == ids[off]).all()):
            raise ValueError(f"M-RoPE positions: the {'video' if is_video else 'image'} block at token {off} is not "
                             f"{n} placeholder tokens (grid {t}x{h}x{w}, merge {rule.merge})")
        out[:, st:off] = torch.arange(nxt, nxt + off - st)
        nxt += off - st
        factor = sec * rule.tokens_per_second if is_video and rule.family == "qwen2_5_vl" else 1.0
        tau = (torch.arange(t, dtype=torch.float64) * factor).long()  # vLLM: (k * t_factor).astype(int64)
        grid = torch.stack(torch.meshgrid(tau, torch.arange(H), torch.arange(W), indexing="ij")).reshape(3, -1)
        out[:, off : off + n] = grid + nxt
        nxt += max(int(tau[-1]), H - 1, W - 1) + 1
        st = off + n
        m += n
    out[:, st:] = torch.arange(nxt, nxt + L - st)
    return out, nxt + L - st


def mrope_positions(ids: torch.Tensor, rule: RopeRule, image_grid_thw: Optional[torch.Tensor] = None,
                    video_grid_thw: Optional[torch.Tensor] = None, second_per_grid_ts: Optional[torch.Tensor] = None,
                    start: int = 0) -> Tuple[torch.Tensor, int]:
    """Positions ``[3, L]`` of one sequence's token ids ``[L]`` (every placeholder expanded) whose media have these
    grids (in order), counted from ``start``, and the next position (max + 1: where a following token goes)."""
    images, videos = _grids(rule, image_grid_thw, video_grid_thw, second_per_grid_ts)
    pos, nxt = _number(ids, rule, images, videos, start)
    if next(images, None) is not None or next(videos, None) is not None:
        raise ValueError("M-RoPE positions: more grids given than media blocks in the token ids")
    return pos, nxt


def vision_positions(rule: RopeRule, ids: torch.Tensor, vision: dict, start: int = 0) -> Tuple[torch.Tensor, int]:
    """``mrope_positions`` with the grids read from a processor output / ``PromptInputs.vision`` dict."""
    return mrope_positions(ids, rule, vision.get("image_grid_thw"), vision.get("video_grid_thw"),
                           vision.get("second_per_grid_ts"), start)


def batch_rope_index(rule: RopeRule, input_ids: torch.Tensor, image_grid_thw=None, video_grid_thw=None,
                     second_per_grid_ts=None, attention_mask=None, **_) -> Tuple[torch.Tensor, torch.Tensor]:
    """``get_rope_index``'s contract with this numbering: positions ``[3, B, L]`` of a padded batch (grids in row
    order; padding gets 1) and ``max + 1 - length`` per row ``[B, 1]``."""
    images, videos = _grids(rule, image_grid_thw, video_grid_thw, second_per_grid_ts)
    out = torch.ones((3,) + tuple(input_ids.shape), dtype=torch.long, device=input_ids.device)
    deltas = []
    for b in range(input_ids.shape[0]):
        keep = attention_mask[b].bool() if attention_mask is not None else torch.ones_like(input_ids[b], dtype=torch.bool)
        pos, nxt = _number(input_ids[b][keep], rule, images, videos, 0)
        out[:, b, keep] = pos.to(out.device)
        deltas.append(nxt - int(keep.sum()))
    return out, torch.tensor(deltas, dtype=torch.long, device=input_ids.device).view(-1, 1)


@contextlib.contextmanager
def trained_numbering(core):
    """Within the block, the model's own ``get_rope_index`` (``model.generate`` and a forward without
    ``position_ids`` call it) numbers positions with this module's rule instead of the installed transformers'."""
    rule = RopeRule.from_config(core.config)
    had = "get_rope_index" in vars(core)
    old = vars(core).get("get_rope_index")
    core.get_rope_index = lambda input_ids, **k: batch_rope_index(rule, input_ids, **k)  # transformers passes keywords
    try:
        yield
    finally:
        if had:
            core.get_rope_index = old
        else:
            del core.get_rope_index
        if hasattr(core, "rope_deltas"):
            core.rope_deltas = None


# ---- the offsets table (docs/positions.md): python -m mmrl.models.mrope --table ----

CASES = (  # (name, frames, fps, height, width): the frames given to the processor, tokens_per_second 2, merge 2
    ("4 frames at 2 fps, 168x168", 4, 2.0, 168, 168),
    ("4 frames at 0.5 fps, 168x168", 4, 0.5, 168, 168),
    ("8 frames of 224x224 over 8 s", 8, 1.0, 224, 224),
    ("16 frames of 448x224 over 60 s", 16, 16 / 60, 448, 224),
    ("4 frames of 56x56 at 2 fps (the demo)", 4, 2.0, 56, 56),
)


def video_case(frames: int, fps: float, height: int, width: int, patch: int = 14, temporal_patch: int = 2
               ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The grid ``[1, 3]`` and ``second_per_grid_ts`` ``[1]`` (float32, as the processor returns it:
    ``temporal_patch_size / fps``) of one video."""
    grid = torch.tensor([[frames // temporal_patch, height // patch, width // patch]])
    return grid, torch.tensor([temporal_patch / fps], dtype=torch.float32)


def installed_rope_index(rule: RopeRule, vision_start_token_id: int):
    """The installed ``transformers``' ``Qwen2_5_VLModel.get_rope_index`` (or Qwen2-VL's / Qwen3-VL's) bound to a
    stand-in holding only the config fields it reads: what ``transformers`` numbers, for comparison."""
    import types

    from transformers import Qwen2_5_VLModel, Qwen2VLModel, Qwen3VLModel

    cls = {"qwen2_vl": Qwen2VLModel, "qwen2_5_vl": Qwen2_5_VLModel, "qwen3_vl": Qwen3VLModel}[rule.family]
    tps = rule.tokens_per_second  # an int in the checkpoints' config.json (5.16-5.17 multiply it into an arange)
    tps = int(tps) if float(tps).is_integer() else tps
    vision = types.SimpleNamespace(spatial_merge_size=rule.merge, tokens_per_second=tps)
    stub = types.SimpleNamespace(config=types.SimpleNamespace(
        vision_config=vision, image_token_id=rule.image_token_id, video_token_id=rule.video_token_id,
        vision_start_token_id=vision_start_token_id))
    if hasattr(cls, "get_vision_position_ids"):
        stub.get_vision_position_ids = types.MethodType(cls.get_vision_position_ids, stub)
    return types.MethodType(cls.get_rope_index, stub)


def offsets_table(tokens_per_second: float = 2.0, merge: int = 2) -> List[Tuple[str, int, int, int]]:
    """For each case, a prompt ``<|vision_start|> video <|vision_end|> text``: (name, the position of the text
    after the video by this rule, by the installed ``transformers``' ``get_rope_index``, their difference)."""
    rule = RopeRule("qwen2_5_vl", image_token_id=1, video_token_id=2, merge=merge, tokens_per_second=tokens_per_second)
    theirs_fn = installed_rope_index(rule, vision_start_token_id=3)
    rows = []
    for name, frames, fps, h, w in CASES:
        grid, secs = video_case(frames, fps, h, w)
        n = int(grid.prod()) // merge**2
        ids = torch.tensor([3] + [2] * n + [4, 5])
        ours, _ = mrope_positions(ids, rule, video_grid_thw=grid, second_per_grid_ts=secs)
        mm = (ids == 2).long() * 2
        theirs, _ = theirs_fn(ids[None], mm_token_type_ids=mm[None], video_grid_thw=grid, second_per_grid_ts=secs,
                              attention_mask=torch.ones_like(ids)[None])
        a, b = int(ours[0, n + 1]), int(theirs[0, 0, n + 1])
        rows.append((name, a, b, a - b))
    return rows


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m mmrl.models.mrope", description=__doc__.split("\n")[0])
    ap.add_argument("--table", action="store_true", help="print the offsets of the text after a video")
    args = ap.parse_args(argv)
    if not args.table:
        ap.print_help()
        return
    import transformers

    print(f"| video (Qwen2.5-VL, tokens_per_second 2) | position of the text after it: original rule | "
          f"transformers {transformers.__version__} | offset |")
    print("|---|---|---|---|")
    for name, ours, theirs, diff in offsets_table():
        print(f"| {name} | {ours} | {theirs} | {diff} |")


if __name__ == "__main__":
    main()
