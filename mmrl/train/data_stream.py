"""An endless, seeded stream over a sample list whose position is part of the checkpoint (exact resume).

Samples whose id is in ``excluded`` (those that failed once, see ``mmrl.train.skips``) are passed over."""
from __future__ import annotations

from typing import Dict, List, Set

import torch

from mmrl.data.schema import Sample
from mmrl.errors import DataError


class DataStream:
    def __init__(self, samples: List[Sample], seed: int, shuffle: bool = True):
        if not samples:
            raise DataError("the training split holds no samples (data.train)")
        self.samples, self.seed, self.shuffle = samples, seed, shuffle
        self.epoch, self.pos = 0, 0
        self.excluded: Set[str] = set()
        self._order = self._make_order()

    def _make_order(self) -> List[int]:
        if not self.shuffle:
            return list(range(len(self.samples)))
        g = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
        return torch.randperm(len(self.samples), generator=g).tolist()

    def next(self, k: int) -> List[Sample]:
        out = []
        if self.excluded and all(s.id in self.excluded for s in self.samples):
            raise DataError("every training sample has been skipped; see skipped.jsonl in the run directory")
        while len(out) < k:
            if self.pos >= len(self._order):
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._make_order()
            s = self.samples[self._order[self.pos]]
            self.pos += 1
            if s.id not in self.excluded:
                out.append(s)
        return out

    def state_dict(self) -> Dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: Dict[str, int]) -> None:
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
        self._order = self._make_order()
