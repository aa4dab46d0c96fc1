"""One decode step of the text stack (the engine's ``expand`` and ``packed`` rows) without ``transformers``' wrappers.

Per step ``transformers`` wraps the arithmetic in the VL model's forward (placeholder masks, rope-index handling),
the text model's (mask preparation, the M-RoPE module with its recomposition, output records), each decoder layer's,
the attention interface and the cache API; at the widths this CPU decodes that Python work is a large share of a step
(``bench/decode_speed.py``). ``TextDecoder.step`` calls the model's own modules (embedding, norms, projections,
MLP, final norm: LoRA adapters and MoE blocks included) in ``transformers``' order, and does the rest with the same
tensor operations, so the hidden states are the same floats (``tests/rollout/test_fused_decode.py``):

- M-RoPE at a text position ``p``, the same on the three axes while decoding, so the recomposition of the axes is
  the identity: ``cos/sin(p * inv_freq)`` on both halves, ``x * cos + rotate_half(x) * sin``;
- Qwen3-VL: the per-head query/key norms before the rotation;
- keys/values appended to the row's cache layer, SDPA under the boolean key mask; for one query per row the query
  heads packed per key head (``gqa = "pack"``, ``pack_gqa`` of 5.23 on) or the key heads repeated (``"repeat"``,
  ``repeat_kv``, what earlier releases do), for several the key heads repeated;
- residuals around attention (``o_proj``) and the MLP; the final norm.

``TextDecoder.build(core)`` returns None where that is not ``transformers``' arithmetic, and the engine keeps its
forward (``eager_step``): an attention other than SDPA, a sliding window, a rotary type other than the default,
forward hooks on the text stack or the core (DeepSpeed ZeRO-3 gathers weights through them), and a step that does
not give the same floats as that forward here. Releases round differently (5.16.1 and 5.20.2 repeat the key heads
where 5.23 and 5.24 pack the query heads: the last bits change), and a version gate cannot know the releases it was
not tried on. So ``verdict`` runs ``self_check`` once per text model, module layout, dtype and device (cached),
for each form of ``GQA_FORMS`` in turn until one passes, through the real model (its weights, dtype and device):
one prefill of two right-padded rows of fixed token ids, then three decode steps in each layout (one token per row,
with a masked column; two samples side by side per row under a block mask), each fed to ``eager_step`` and to
``TextDecoder.step`` over copies of the same cache. The fused step is used (in that form) only if every step's
hidden states (final norm applied; the LM head maps them to the logits) are ``torch.equal``; otherwise one warning
line says why and the engine decodes with ``transformers``' forward (same tokens, without the speed-up). The check
runs under ``no_grad`` in eval mode on a forked RNG, and restores each module's training flag and the core's
``rope_deltas``. It proves equality on its own input; other shapes go through the same modules and tensor
operations (``tests/rollout/test_fused_decode.py`` compares whole decodes, ``bench/fused_check_cost.py`` its cost).
"""
from __future__ import annotations

import logging
import weakref
from typing import Optional

import torch
import torch.nn.functional as F
import transformers

from mmrl.models.compat import cache_kwargs, output_cache
from mmrl.models.kv_cache import growing_cache
from mmrl.models.prefill import positions

LOG = logging.getLogger(__name__)
GQA_FORMS = ("pack", "repeat")  # one query per row: pack_gqa (5.23 on), then earlier releases' repeat_kv
CHECK_ROWS, CHECK_PROMPT, CHECK_STEPS, CHECK_SAMPLES = 2, 6, 3, 2  # the self-check's input (see the docstring)
_ABSENT = object()
_VERDICTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # text model -> {signature: (form, why not)}


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin


class TextDecoder:
    """The text stack of a Qwen-VL core for single-token decode steps; see the module docstring."""

    def __init__(self, lm):
        self.lm, self.layers = lm, list(lm.layers)
        cfg = lm.config
        a = self.layers[0].self_attn
        self.H, self.KV, self.D = cfg.num_attention_heads, cfg.num_key_value_heads, a.head_dim
        self.scaling = a.scaling
        self.inv_freq = lm.rotary_emb.inv_freq
        self.attention_scaling = lm.rotary_emb.attention_scaling
        self.qk_norm = hasattr(a, "q_norm")
        self.gqa = GQA_FORMS[0]  # set by ``verdict``

    @classmethod
    def build(cls, core) -> Optional["TextDecoder"]:
        """A decoder for ``core``'s text stack, or None where ``transformers``' forward must be kept."""
        lm = cls.text_stack(core)
        if lm is None:
            return None
        dec = cls(lm)
        return dec if verdict(core, dec) is None else None

    @staticmethod
    def text_stack(core):
        """``core``'s text model where the step's structure is ``transformers``' (module docstring), else None."""
        lm = getattr(core, "language_model", None)
        if lm is None or not hasattr(lm, "layers") or not hasattr(lm, "rotary_emb"):
            return None
        cfg = lm.config
        if getattr(cfg, "_attn_implementation", None) != "sdpa" or getattr(cfg, "use_sliding_window", False):
            return None
        rope = getattr(cfg, "rope_parameters", None) or {}
        if rope.get("rope_type", "default") != "default" or getattr(lm.rotary_emb, "rope_type", "default") != "default":
            return None
        if core._forward_hooks or core._forward_pre_hooks:  # the step does not go through the core's forward
            return None
        for m in lm.modules():
            if m._forward_hooks or m._forward_pre_hooks:
                return None
        for L in lm.layers:
            a = L.self_attn
            if not all(hasattr(a, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")):
                return None
            if getattr(a, "sliding_window", None) is not None:
                return None
        return lm

    def step(self, ids: torch.Tensor, pos: torch.Tensor, cache, mask: torch.Tensor) -> torch.Tensor:
        """Hidden states (final norm applied) after feeding tokens ``ids`` at text positions ``pos``: ``[B]`` (one
        token per row, the ``expand`` rows; returns ``[B, hidden]``) or ``[B, S]`` (the ``packed`` rows; returns
        ``[B, S, hidden]``). Each layer's keys/values are appended to ``cache.layers[i]`` and attention reads the
        cache under the boolean ``mask [B, 1, S, L]``. One query per row: the query heads packed per key head
        (``pack_gqa``) or the key heads repeated (``repeat_kv``), by ``self.gqa``; several: the key heads repeated."""
        single = ids.dim() == 1
        ids, pos = ids.view(ids.shape[0], -1), pos.view(pos.shape[0], -1)
        (B, S), H, KV, D = ids.shape, self.H, self.KV, self.D
        h = self.lm.embed_tokens(ids)
        f = pos[..., None].float() * self.inv_freq.to(device=h.device, dtype=torch.float)
        cos, sin = f.cos() * self.attention_scaling, f.sin() * self.attention_scaling
        cos = torch.cat((cos, cos), dim=-1).to(h.dtype).unsqueeze(1)  # [B, 1, S, D]
        sin = torch.cat((sin, sin), dim=-1).to(h.dtype).unsqueeze(1)
        for i, L in enumerate(self.layers):
            a = L.self_attn
            x = L.input_layernorm(h)
            q, k, v = a.q_proj(x).view(B, S, H, D), a.k_proj(x).view(B, S, KV, D), a.v_proj(x).view(B, S, KV, D)
            if self.qk_norm:
                q, k = a.q_norm(q), a.k_norm(k)
            q, k = _rotate(q.transpose(1, 2), cos, sin), _rotate(k.transpose(1, 2), cos, sin)
            keys, values = cache.layers[i].update(k, v.transpose(1, 2))
            if S == 1 and self.gqa == "pack":
                q = q.reshape(B, KV, H // KV, D)
            else:
                keys, values = _repeat(keys, H // KV), _repeat(values, H // KV)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, dropout_p=0.0, scale=self.scaling,
                                               is_causal=False)
            h = h + a.o_proj(o.reshape(B, -1, S, values.shape[-1]).transpose(1, 2).contiguous().reshape(B, S, -1))
            h = h + L.mlp(L.post_attention_layernorm(h))
        h = self.lm.norm(h)
        return h[:, 0] if single else h


def _repeat(x: torch.Tensor, n: int) -> torch.Tensor:
    """``[B, KV, L, D]`` -> ``[B, KV * n, L, D]``, each key head ``n`` times in a row (``transformers``' repeat_kv)."""
    if n == 1:
        return x
    B, KV, L, D = x.shape
    return x[:, :, None].expand(B, KV, n, L, D).reshape(B, KV * n, L, D)


def eager_step(core, ids: torch.Tensor, pos: torch.Tensor, cache, mask: torch.Tensor) -> torch.Tensor:
    """``TextDecoder.step`` by ``transformers``' forward of the core (the reference, and the engine's decode where the
    fused step is off): the same arguments and result."""
    single = ids.dim() == 1
    ids, pos = ids.view(ids.shape[0], -1), pos.view(pos.shape[0], -1)
    hid = core(input_ids=ids, attention_mask=mask, position_ids=pos.unsqueeze(0).expand(3, -1, -1), use_cache=True,
               **cache_kwargs(cache)).last_hidden_state
    return hid[:, 0] if single else hid


def verdict(core, dec: TextDecoder) -> Optional[str]:
    """None when ``self_check`` passed for one of ``GQA_FORMS`` (``dec.gqa`` set to the first that did), else why
    not (one warning line logged); run once per text model, module layout, dtype and device (cached)."""
    lm = dec.lm
    key = (tuple(type(m) for m in lm.modules()), frozenset((p.dtype, p.device) for p in lm.parameters()))
    seen = _VERDICTS.setdefault(lm, {})
    if key not in seen:
        whys = []
        for form in GQA_FORMS:
            dec.gqa = form
            why = self_check(core, dec)
            if why is None:
                seen[key] = (form, None)
                break
            whys.append(f"{form}: {why}")
        else:
            seen[key] = (GQA_FORMS[0], "; ".join(whys))
            p = next(lm.parameters())
            LOG.warning("mmrl: the fused decode step is off for %s (%s, %s, transformers %s): %s; decoding with "
                        "transformers' forward (same tokens, without the speed-up)", type(core).__name__, p.dtype,
                        p.device, transformers.__version__, seen[key][1])
    dec.gqa, why = seen[key]
    return why


def self_check(core, dec: TextDecoder) -> Optional[str]:
    """None when ``dec.step`` gives the same floats as ``eager_step`` through ``core`` (every decode step of the
    check's input, both layouts: see the module docstring), else why not. Leaves the RNG, the modules' training
    flags and the core's ``rope_deltas`` as they were."""
    device = next(dec.lm.parameters()).device
    B, P, T, K, V = CHECK_ROWS, CHECK_PROMPT, CHECK_STEPS, CHECK_SAMPLES, dec.lm.config.vocab_size
    modes = [(m, m.training) for m in core.modules()]
    deltas = core.__dict__.get("rope_deltas", _ABSENT)
    try:
        core.eval()
        with torch.no_grad(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            ids = (torch.arange(B * P, device=device).view(B, P) * 7 + 3) % V
            lengths = torch.tensor([P, P - 2], device=device)
            mask = torch.arange(P, device=device).view(1, P) < lengths.view(B, 1)  # row 1 right-padded
            out = core(input_ids=ids, attention_mask=mask.long(), position_ids=positions(lengths * 0, P),
                       use_cache=True)
            prefill, rows = output_cache(out), torch.arange(B, device=device)
            for layout, S in (("expand", 1), ("packed", K)):
                caches = [growing_cache(prefill, rows, P + T * S) for _ in range(2)]
                cols = mask[:, None, None, :].expand(B, 1, S, P)
                for t in range(T):
                    tok = (torch.arange(B * S, device=device).view(B, S) * 5 + 11 * t + 1) % V
                    new = torch.eye(S, dtype=torch.bool, device=device).view(1, 1, S, S).expand(B, 1, S, S).clone()
                    if layout == "expand" and t == T - 1:
                        new[1] = False  # a finished row's token: its column is padding
                    cols = torch.cat([cols, new], dim=-1)
                    p = (lengths + t).view(B, 1).expand(B, S)
                    if S == 1:
                        tok, p = tok[:, 0], p[:, 0]
                    ref = eager_step(core, tok, p, caches[0], cols)
                    try:
                        got = dec.step(tok, p, caches[1], cols)
                    except Exception as e:  # a release whose modules the step does not know
                        return f"the fused step raised {type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
                    if not torch.equal(ref, got):
                        same_shape = ref.shape == got.shape
                        diff = float((ref.float() - got.float()).abs().max()) if same_shape else float("nan")
                        return (f"its hidden states differ from transformers' forward at {layout} step {t + 1} "
                                f"(max |difference| {diff:.1e})")
    finally:
        for m, mode in modes:
            m.training = mode
        if deltas is not _ABSENT:
            core.rope_deltas = deltas
        else:
            core.__dict__.pop("rope_deltas", None)
    return None
