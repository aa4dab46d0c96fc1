"""A KV cache for decoding whose per-step cost does not grow with the length already generated.

``transformers``' ``DynamicLayer`` appends each step's keys/values with ``torch.cat``, which copies the whole
cache every step: decoding ``T`` tokens after a ``P``-token prompt copies ``sum_t (P + t) ~ T*P + T^2/2`` columns
per row and layer (quadratic in ``T``). ``StaticLayer`` writes in place but hands attention the whole buffer (all
``max_cache_len`` columns, masked) from the first step on. ``GrowingLayer`` does both right: the keys/values live
in a preallocated buffer (capacity doubled when full, so total copying stays linear), each step writes its
column in place, and attention gets a view of the filled columns only. Used by the HF rollout engine under
``torch.no_grad`` (the in-place writes are not meant for autograd).

Multi-turn episodes (``mmrl.rollout.hf_turns``) keep each episode's real keys/values between turns (``EpisodeKV``),
gather the active ones into one batched ``GrowingLayer`` cache per turn (``gather_episodes``) and take each row's
real columns back out after it (``episode_rows``).
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer


class GrowingLayer(DynamicLayer):
    """One layer's keys/values ``[B, H, capacity, D]``, filled to ``length``; ``keys``/``values`` are views."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int):
        super().__init__()
        B, H, L, _ = keys.shape
        capacity = max(capacity, L)
        self._k = keys.new_empty((B, H, capacity, keys.shape[-1]))
        self._v = values.new_empty((B, H, capacity, values.shape[-1]))
        self._k[:, :, :L] = keys
        self._v[:, :, :L] = values
        self.length, self.device, self.is_initialized = L, keys.device, True
        self._views()

    @classmethod
    def wrap(cls, keys: torch.Tensor, values: torch.Tensor, length: int) -> "GrowingLayer":
        """A layer over preallocated buffers ``[B, H, capacity, D]`` (no copy) whose first ``length`` columns are filled."""
        layer = cls.__new__(cls)
        DynamicLayer.__init__(layer)
        layer._k, layer._v, layer.length, layer.device, layer.is_initialized = keys, values, length, keys.device, True
        layer._views()
        return layer

    def _views(self) -> None:
        self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        if end > self._k.shape[2]:  # full: double the capacity (amortised O(1) copy per column)
            grow = max(end, 2 * self._k.shape[2]) - self._k.shape[2]
            self._k = torch.cat([self._k, self._k.new_empty(self._k.shape[:2] + (grow, self._k.shape[3]))], dim=2)
            self._v = torch.cat([self._v, self._v.new_empty(self._v.shape[:2] + (grow, self._v.shape[3]))], dim=2)
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self.length = end
        self._views()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only rows ``indices`` (e.g. drop finished sequences): one copy of the filled part."""
        self._k, self._v = self._k.index_select(0, indices), self._v.index_select(0, indices)
        self._views()


def select_rows(cache: Cache, rows: torch.Tensor) -> None:
    """Row ``i`` of every layer of ``cache`` becomes its row ``rows[i]`` (rows may repeat: a prompt's cache copied
    for each of its responses), by ``index_select`` on the batch axis, with gradients.

    Not ``Cache.batch_select_indices``: ``transformers``' ``DynamicLayer`` does it as ``keys[rows, ...]``, whose
    backward (``index_put_`` with ``accumulate=True``) adds the gradients of repeated rows with parallel atomic float
    adds on CPU once ``torch.get_num_threads() > 1`` and the tensor has >= 32768 elements (ATen ``index_put_kernel``):
    the order of the adds, hence the last bits of every gradient upstream (the prompt's keys/values, the whole
    prefill, the vision tower), changes from run to run. ``index_select``'s backward (``index_add_``, a
    ``scatter_add_`` on the batch axis) adds them in a fixed order."""
    for layer in cache.layers:
        if isinstance(layer, GrowingLayer):
            layer.batch_select_indices(rows)
        else:
            layer.keys, layer.values = layer.keys.index_select(0, rows), layer.values.index_select(0, rows)


def growing_cache(prefix: Cache, rows: torch.Tensor, capacity: int) -> Cache:
    """A cache whose row ``i`` starts as row ``rows[i]`` of ``prefix`` (e.g. each sample its prompt's keys/values,
    gathered once), with room for ``capacity`` columns before any reallocation."""
    layers = [GrowingLayer(layer.keys.index_select(0, rows), layer.values.index_select(0, rows), capacity)
              for layer in prefix.layers]
    return Cache(layers=layers)


# ---- keys/values kept across the turns of multi-turn episodes -----------------------------------------------------
class EpisodeKV:
    """One episode's keys/values between its turns: per layer ``[H, L, D]`` holding only the real tokens of its
    sequence so far, in order (padding and tokens after a turn's end dropped: rotary positions are already applied
    to the keys, so the columns need not be contiguous positions), ``next_pos``, the M-RoPE position of the next
    token, and ``seen``, how many tokens of the episode's sequence (prompt, model turns, observations) it holds."""

    def __init__(self, keys, values, next_pos: int, seen: int):
        self.keys, self.values, self.next_pos, self.seen = keys, values, int(next_pos), int(seen)

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[1])


def gather_episodes(states, capacity: int):
    """A batched cache whose row ``i`` holds ``states[i]`` (right-padded with zeros to the longest; zeros, never
    uninitialised memory, since attention multiplies masked columns' values by 0) and the boolean mask ``[B, C]`` of
    its real columns; room for ``capacity`` columns. The states' tensors are released (the cache owns the copy)."""
    B, C = len(states), max(s.length for s in states)
    ref = states[0].keys
    device = ref[0].device
    mask = torch.zeros((B, C), dtype=torch.bool, device=device)
    for i, s in enumerate(states):
        mask[i, : s.length] = True
    layers = []
    for li in range(len(ref)):
        H, _, D = ref[li].shape
        k = ref[li].new_zeros((B, H, max(capacity, C), D))
        v = states[0].values[li].new_zeros((B, H, max(capacity, C), states[0].values[li].shape[-1]))
        for i, s in enumerate(states):
            k[i, :, : s.length] = s.keys[li]
            v[i, :, : s.length] = s.values[li]
        layers.append(GrowingLayer.wrap(k, v, C))
    for s in states:
        s.keys = s.values = None
    return Cache(layers=layers), mask


def episode_rows(cache: Cache, rows: torch.Tensor, valid: torch.Tensor):
    """For each row ``rows[i]`` of ``cache``, its keys and values (per layer ``[H, L_i, D]``, a copy) at the columns
    where ``valid[i]`` (a boolean ``[len(rows), C]`` over the first ``C`` filled columns)."""
    out = []
    for i, b in enumerate(rows.tolist()):
        cols = valid[i].nonzero().squeeze(1)
        out.append(([layer.keys[b].index_select(1, cols) for layer in cache.layers],
                    [layer.values[b].index_select(1, cols) for layer in cache.layers]))
    return out
