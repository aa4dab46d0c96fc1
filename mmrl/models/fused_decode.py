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
- keys/values appended to the row's cache layer, SDPA under the boolean key mask with the query heads packed per key
  head for one query per row (``transformers``' ``pack_gqa``), the key heads repeated for several (``repeat_kv``);
- residuals around attention (``o_proj``) and the MLP; the final norm.

``TextDecoder.build(core)`` returns None where that is not ``transformers``' arithmetic, and the engine keeps its
forward: an attention other than SDPA, a sliding window, a rotary type other than the default, forward hooks on the
text stack (DeepSpeed ZeRO-3 gathers weights through them), and a ``transformers`` release older than
``SAME_FLOATS_FROM``: the step follows 5.24's order of operations, and under 5.16.1 the log-probs differ from
``transformers``' forward in the last bits (every family; measured with ``make test-lowest``), so older releases keep
``transformers``' forward (same tokens and floats as before, without the speed-up).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
import transformers
from packaging.version import Version

SAME_FLOATS_FROM = Version("5.24.0")  # the oldest release whose forward this step equals bit for bit (tested)
SAME_FLOATS = Version(transformers.__version__) >= SAME_FLOATS_FROM


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

    @classmethod
    def build(cls, core) -> Optional["TextDecoder"]:
        """A decoder for ``core``'s text stack, or None where ``transformers``' forward must be kept."""
        if not SAME_FLOATS:
            return None
        lm = getattr(core, "language_model", None)
        if lm is None or not hasattr(lm, "layers") or not hasattr(lm, "rotary_emb"):
            return None
        cfg = lm.config
        if getattr(cfg, "_attn_implementation", None) != "sdpa" or getattr(cfg, "use_sliding_window", False):
            return None
        rope = getattr(cfg, "rope_parameters", None) or {}
        if rope.get("rope_type", "default") != "default" or getattr(lm.rotary_emb, "rope_type", "default") != "default":
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
        return cls(lm)

    def step(self, ids: torch.Tensor, pos: torch.Tensor, cache, mask: torch.Tensor) -> torch.Tensor:
        """Hidden states (final norm applied) after feeding tokens ``ids`` at text positions ``pos``: ``[B]`` (one
        token per row, the ``expand`` rows; returns ``[B, hidden]``) or ``[B, S]`` (the ``packed`` rows; returns
        ``[B, S, hidden]``). Each layer's keys/values are appended to ``cache.layers[i]`` and attention reads the
        cache under the boolean ``mask [B, 1, S, L]``. One query per row: the query heads packed per key head
        (``transformers``' ``pack_gqa``); several: the key heads repeated (``repeat_kv``), as ``transformers`` does."""
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
            if S == 1:
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
