"""A KV cache for decoding whose per-step cost does not grow with the length already generated.

``transformers``' ``DynamicLayer`` appends each step's keys/values with ``torch.cat``, which copies the whole
cache every step: decoding ``T`` tokens after a ``P``-token prompt copies ``sum_t (P + t) ~ T*P + T^2/2`` columns
per row and layer (quadratic in ``T``). ``StaticLayer`` writes in place but hands attention the whole buffer (all
``max_cache_len`` columns, masked) from the first step on. ``GrowingLayer`` does both right: the keys/values live
in a preallocated buffer (capacity doubled when full, so total copying stays linear), each step writes its
column in place, and attention gets a view of the filled columns only. Used by the HF rollout engine under
``torch.no_grad`` (the in-place writes are not meant for autograd).
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


def growing_cache(prefix: Cache, rows: torch.Tensor, capacity: int) -> Cache:
    """A cache whose row ``i`` starts as row ``rows[i]`` of ``prefix`` (e.g. each sample its prompt's keys/values,
    gathered once), with room for ``capacity`` columns before any reallocation."""
    layers = [GrowingLayer(layer.keys.index_select(0, rows), layer.values.index_select(0, rows), capacity)
              for layer in prefix.layers]
    return Cache(layers=layers)
