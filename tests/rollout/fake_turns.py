"""A model-free stand-in for the processor and the engine of a multi-turn episode (imported as ``fake_turns``).

``FakeProcessor`` renders the real Qwen-VL chat template (``mmrl.models.chat_template``) with jinja2 and tokenizes
like a Qwen processor: the special tokens have fixed ids, every other character is one token (its code point),
and an ``<|image_pad|>`` / ``<|video_pad|>`` expands to one pad per merged 28x28 patch (a video: per frame pair),
typed 1 / 2 in ``mm_token_type_ids``, with one pixel row per 14x14 patch holding the medium's first pixel value
(so tests can tell media apart). ``ScriptedEngine`` answers every sample of a call with a scripted text.
"""
from __future__ import annotations

import contextlib
import re
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

import jinja2
import torch
import transformers.video_utils  # noqa: F401  (imported by mmrl.media.inputs for videos; loaded once here)

from mmrl.data.schema import Trajectory
from mmrl.models.chat_template import QWEN_VL_CHAT_TEMPLATE

SPECIAL = {"<|im_start|>": 900, "<|im_end|>": 901, "<|vision_start|>": 902, "<|vision_end|>": 903,
           "<|image_pad|>": 904, "<|video_pad|>": 905, "<|endoftext|>": 906}
IM_END, IMAGE_PAD, VIDEO_PAD, PAD = 901, 904, 905, 906
_SPLIT = re.compile("(" + "|".join(re.escape(s) for s in SPECIAL) + ")")
_TEMPLATE = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                               extensions=["jinja2.ext.loopcontrols"]).from_string(QWEN_VL_CHAT_TEMPLATE)


def tokenize(text: str) -> List[int]:
    return [SPECIAL[p] if p in SPECIAL else min(ord(c), 899) for p in _SPLIT.split(text) if p
            for c in ([p] if p in SPECIAL else p)]


def detokenize(ids) -> str:
    inv = {v: k for k, v in SPECIAL.items()}
    return "".join(inv.get(int(i), chr(int(i))) for i in ids)


class FakeTokenizer:
    def convert_tokens_to_ids(self, token: str) -> int:
        return SPECIAL[token]


class FakeProcessor:
    """The parts of a Qwen2.5-VL processor that the multi-turn loop and ``encode_texts`` use."""

    def __init__(self, fail_on: Optional[str] = None):
        self.tokenizer = FakeTokenizer()
        self.image_processor = SimpleNamespace(patch_size=14, merge_size=2)
        self.video_processor = None
        self.fail_on, self.calls = fail_on, []

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        assert tokenize is False
        return _TEMPLATE.render(messages=messages, add_generation_prompt=add_generation_prompt)

    def __call__(self, text, return_tensors="pt", padding=True, images=None, videos=None, **kw):
        self.calls.append({"text": list(text), "images": len(images or []), "videos": len(videos or [])})
        if self.fail_on is not None and any(self.fail_on in t for t in text):
            raise RuntimeError(f"cannot process {self.fail_on!r}" + "x" * 400)
        images, videos = list(images or []), list(videos or [])
        rows, types, pix, grids = [], [], {"image": [], "video": []}, {"image": [], "video": []}
        for t in text:
            ids, ty = [], []
            for tok in tokenize(t):
                if tok in (IMAGE_PAD, VIDEO_PAD):
                    kind = "image" if tok == IMAGE_PAD else "video"
                    x = (images if kind == "image" else videos).pop(0)
                    frames = 1 if kind == "image" else x.shape[0] // 2
                    g = torch.tensor([[frames, x.shape[-2] // 14, x.shape[-1] // 14]])
                    grids[kind].append(g)
                    pix[kind].append(torch.full((int(g.prod()), 4), float(x.flatten()[0])))
                    n = int(g.prod()) // 4
                    ids += [tok] * n
                    ty += [1 if kind == "image" else 2] * n
                else:
                    ids.append(tok)
                    ty.append(0)
            rows.append(ids)
            types.append(ty)
        width = max(len(r) for r in rows)
        out = {"input_ids": torch.tensor([r + [PAD] * (width - len(r)) for r in rows]),
               "attention_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows]),
               "mm_token_type_ids": torch.tensor([t + [0] * (width - len(t)) for t in types])}
        for kind, (pk, gk) in {"image": ("pixel_values", "image_grid_thw"),
                               "video": ("pixel_values_videos", "video_grid_thw")}.items():
            if grids[kind]:
                out[pk], out[gk] = torch.cat(pix[kind]), torch.cat(grids[kind])
        return out


class ScriptedEngine:
    """Answers output ``i`` of call ``c`` (outputs in request order, ``n`` per request) with ``script[(c, i)]`` =
    ``(text, truncated)``, else ``(f"c{c}o{i}", False)``; a reply that is not truncated ends with ``<|im_end|>``.
    Log-probs are ``-(c + 1) - k / 10`` for the k-th token. With ``kv=True`` it keeps per-episode caches (the
    ``start_episodes`` / ``continue_episodes`` API of the HF engine): ``seen`` counts every token fed, which is all
    but the last sampled one."""

    supports_sequences = True

    def __init__(self, script: Optional[Dict[Tuple[int, int], Tuple[str, bool]]] = None, kv: bool = False):
        self.script, self.calls, self.tails, self.awake_log = dict(script or {}), [], [], []
        self.supports_kv_reuse = kv

    @contextlib.contextmanager
    def awake(self):
        self.awake_log.append("enter")
        yield
        self.awake_log.append("exit")

    def _reply(self, c: int, i: int, req) -> Trajectory:
        text, cut = self.script.get((c, i), (f"c{c}o{i}", False))
        ids = torch.tensor(tokenize(text) + ([] if cut else [IM_END]), dtype=torch.long)
        lps = -(c + 1) - torch.arange(ids.numel(), dtype=torch.float32) / 10
        return Trajectory(sample_id=req.sample_id, group_id=req.group_id, view=req.view, role=req.role,
                          prompt_ids=req.inputs.input_ids, response_ids=ids, logprobs=lps,
                          loss_mask=torch.ones(ids.numel(), dtype=torch.bool), text=text, truncated=cut)

    def generate(self, requests, params) -> List[Trajectory]:
        c = len(self.calls)
        self.calls.append(("generate", list(requests), params))
        flat = [r for r in requests for _ in range(r.n)]
        return [self._reply(c, i, r) for i, r in enumerate(flat)]

    def start_episodes(self, requests, params):
        trajs = self.generate(requests, params)
        self.calls[-1] = ("start",) + self.calls[-1][1:]
        flat = [r for r in requests for _ in range(r.n)]
        states = [SimpleNamespace(seen=r.inputs.num_tokens + t.response_ids.numel() - 1) for r, t in zip(flat, trajs)]
        return trajs, states

    def continue_episodes(self, states, tails, params, requests):
        c = len(self.calls)
        self.calls.append(("continue", list(requests), params))
        self.tails.append(list(tails))
        trajs = [self._reply(c, i, r) for i, r in enumerate(requests)]
        for st, tail, t in zip(states, tails, trajs):
            st.seen += tail.num_tokens + t.response_ids.numel() - 1
        return trajs
