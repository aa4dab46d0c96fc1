"""One token per row from probabilities ``[N, V]``: ``torch.multinomial``'s draw, bit for bit, at less cost on CPU.

``torch.multinomial(p, 1)`` (ATen ``Distributions.cpp``, the ``n_sample == 1`` branch) is the exponential-race
form of the Gumbel-max trick::

    q ~ Exp(1) per element (``empty_like(p).exponential_()``),   token = argmax_j p_j / q_j

and on CPU its ``exponential_`` draws each float32 variate as ``-log1p(-u)`` of one float64 uniform ``u`` from the
generator, in memory order, through a serial per-element loop (~27 ns an element here; ``torch.rand`` in float64
plus a vectorised ``log1p`` takes ~9). ``multinomial_rows`` draws the same ``u`` with ``torch.rand(..., float64)``
over blocks of rows (in memory order, so the generator advances exactly as it would; a block keeps the float64
buffer in cache at a 150k vocabulary), forms the same ``q`` and takes the same ``argmax``: the same tokens and the
same generator state after, for a fixed seed. Whether this build of torch draws that way is checked once per process
(``exact_on_this_build``, against ``torch.multinomial`` on a forked RNG); where it does not (another version, a
CUDA tensor, whose generator is Philox), ``torch.multinomial`` itself is called.
"""
from __future__ import annotations

import torch

BLOCK_ELEMENTS = 1 << 17  # float64 uniforms per block (1 MiB)
_EXACT = None


def exact_on_this_build() -> bool:
    """True when ``multinomial_rows``' CPU draw equals ``torch.multinomial`` here (tokens and generator state after);
    computed once per process on a forked generator, so the caller's RNG stream is untouched."""
    global _EXACT
    if _EXACT is None:
        with torch.random.fork_rng(devices=[]):
            p = torch.softmax(torch.randn(5, 37, generator=torch.Generator().manual_seed(0)) * 3, -1)
            torch.manual_seed(1234)
            ref, after_ref = torch.multinomial(p, 1).squeeze(1), torch.rand(2)
            torch.manual_seed(1234)
            ours, after = _race(p), torch.rand(2)
        _EXACT = bool(torch.equal(ref, ours) and torch.equal(after_ref, after))
    return _EXACT


def _race(probs: torch.Tensor) -> torch.Tensor:
    """argmax_j p_j / q_j with q_j = -log1p(-u_j), u drawn in float64 row block by row block (memory order)."""
    N, V = probs.shape
    out = torch.empty(N, dtype=torch.long)
    rows = max(1, BLOCK_ELEMENTS // max(V, 1))
    for s in range(0, N, rows):
        p = probs[s : s + rows]
        q = torch.rand(p.shape, dtype=torch.float64).neg_().log1p_().neg_().to(probs.dtype)
        out[s : s + rows] = torch.div(p, q, out=q).argmax(-1)
    return out


def multinomial_rows(probs: torch.Tensor) -> torch.Tensor:
    """One index per row of ``probs [N, V]`` (non-negative, finite, rows not all zero), drawn from the global
    generator exactly as ``torch.multinomial(probs, 1).squeeze(1)`` draws it."""
    if (probs.device.type != "cpu" or probs.dtype != torch.float32 or probs.dim() != 2 or not probs.is_contiguous()
            or not exact_on_this_build()):
        return torch.multinomial(probs, 1).squeeze(1)
    total = probs.sum(-1)  # NaN or inf anywhere in a row makes its sum non-finite
    if not (bool(torch.isfinite(total).all()) and bool((total > 0).all()) and float(probs.min()) >= 0):
        return torch.multinomial(probs, 1).squeeze(1)  # raises torch's own error for a bad distribution
    return _race(probs)
