"""A micro Qwen2.5-VL built in memory from a config, without a tokenizer or a processor (imported as ``micro_model``):
the real model class at the tiny test model's widths, a 64-token vocabulary whose last ids are Qwen's special tokens,
and prompts written token by token with hand-built vision tensors (an image of 4x6 patches, a video of 2x4x4).

Building it takes well under a second (the embedded tiny model is trained and saved: tens of seconds), so the
scorer's mutation group can run a real forward on every mutant.
"""
from __future__ import annotations

import torch
import transformers  # noqa: F401  (the model classes: imported once, by the collecting process)

from mmrl.media.inputs import PromptInputs
from mmrl.models.families import model_class_for
from mmrl.models.tiny import QWEN_SPECIAL_TOKENS, TinySpec, build_config

VOCAB = 64
SPECIAL = {t: VOCAB - len(QWEN_SPECIAL_TOKENS) + i for i, t in enumerate(QWEN_SPECIAL_TOKENS)}
PAD, V_START, V_END = SPECIAL["<|endoftext|>"], SPECIAL["<|vision_start|>"], SPECIAL["<|vision_end|>"]
IMAGE, VIDEO = SPECIAL["<|image_pad|>"], SPECIAL["<|video_pad|>"]
PATCH_ROW = 3 * 2 * 14 * 14  # channels x temporal patch x patch x patch
MODEL_CLASS = model_class_for("qwen2_5_vl")  # resolves transformers' lazy module once, at import


class _Vocab:
    def convert_tokens_to_ids(self, token: str) -> int:
        return SPECIAL[token]

    def __len__(self) -> int:
        return VOCAB


def micro_model(seed: int = 0):
    spec = TinySpec(text_hidden=64, text_layers=2, text_heads=2, text_kv_heads=1, text_intermediate=64,
                    vision_hidden=32, vision_layers=2, vision_heads=2, vision_intermediate=32, seed=seed)
    torch.manual_seed(seed)
    model = MODEL_CLASS(build_config(_Vocab(), spec))
    return model.eval()


def _text(g, n):
    return torch.randint(0, VOCAB - len(QWEN_SPECIAL_TOKENS), (n,), generator=g).tolist()


def prompt(kind: str, n_text: int = 5, seed: int = 0) -> PromptInputs:
    """``n_text`` text tokens, then an image (``kind="image"``, grid 1x4x6: 6 pads), a video (``"video"``, grid 2x4x4:
    8 pads, 1 s per grid step) or nothing (``"text"``), then 3 more text tokens."""
    g = torch.Generator().manual_seed(seed)
    ids, types, vision = _text(g, n_text), [0] * n_text, {}
    if kind in ("image", "video"):
        grid = torch.tensor([[1, 4, 6]] if kind == "image" else [[2, 4, 4]])
        rows, pads = int(grid.prod()), int(grid.prod()) // 4
        pix = torch.randn(rows, PATCH_ROW, generator=g)
        ids += [V_START] + [IMAGE if kind == "image" else VIDEO] * pads + [V_END]
        types += [0] + [1 if kind == "image" else 2] * pads + [0]
        if kind == "image":
            vision = {"pixel_values": pix, "image_grid_thw": grid}
        else:
            vision = {"pixel_values_videos": pix, "video_grid_thw": grid, "second_per_grid_ts": torch.tensor([1.0])}
    ids += _text(g, 3)
    types += [0] * 3
    return PromptInputs(input_ids=torch.tensor(ids), mm_token_type_ids=torch.tensor(types), vision=vision)


def response(length: int, seed: int) -> torch.Tensor:
    return torch.tensor(_text(torch.Generator().manual_seed(100 + seed), length))
