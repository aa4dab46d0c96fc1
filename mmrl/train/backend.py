"""What differs between training backends, behind one small interface; the step and the loop are shared.

``Backend`` is one process (``torch``); ``DeepSpeedBackend`` (``mmrl.train.deepspeed_backend``) is N ranks under
ZeRO. The step (``mmrl.train.step``) calls only these methods:

- ranks: ``world_size``, ``rank``, ``shard(n)`` (this rank's block of the step's prompts), ``gather`` (objects, rank
  order), ``all_reduce``, ``barrier``;
- passes: ``score(items, reference)`` (no-grad log-probs under the policy or the reference), ``train_logprobs``
  (the actor forward), ``backward(loss, last)``, ``step()`` (clip, optimizer step; returns the gradient norm),
  ``zero_grad``, ``scheduler_step``;
- rollout: ``rollout_context()`` (e.g. ZeRO-3 gathers whole weights), ``sync_rollout_weights(engine)``;
- state: ``save(out_dir, step, extra, keep)``, ``load(path) -> extra``, ``latest(out_dir)``, ``export(path)``.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from mmrl.models.scoring import response_logprobs


class Backend:
    """One process: a plain ``torch`` model, AdamW, autocast; the reference is a frozen copy or the adapter off."""

    name = "torch"

    def __init__(self, model, optimizer, scheduler, ref_model, autocast, cfg, pad_id: int):
        self.model, self.optimizer, self.scheduler, self.ref_model = model, optimizer, scheduler, ref_model
        self.autocast, self.cfg, self.pad_id = autocast, cfg, pad_id

    # ---- ranks --------------------------------------------------------------------------------------------------
    world_size = 1
    rank = 0

    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, n: int) -> Tuple[int, int]:
        from mmrl.dist import shard_range

        return shard_range(n, self.world_size, self.rank)

    def gather(self, obj: Any) -> List[Any]:
        return [obj]

    def all_reduce(self, values: Sequence[float], op: str = "sum") -> List[float]:
        return [float(v) for v in values]

    def barrier(self) -> None:
        return None

    # ---- passes -------------------------------------------------------------------------------------------------
    def chunk_tokens(self) -> int:
        """Tokens per LM-head chunk of the scorer (``train.logprob_chunk_tokens``)."""
        return self.cfg.train.logprob_chunk_tokens

    def _kw(self):
        return dict(temperature=self.cfg.rollout.temperature, micro_batch=self.cfg.train.micro_batch,
                    pad_id=self.pad_id, chunk_tokens=self.chunk_tokens())

    @torch.no_grad()
    def score(self, items, reference: bool = False, fallback=None) -> List[torch.Tensor]:
        """Old (behaviour-policy) or reference log-probs of ``items = [(PromptInputs, response_ids)]``."""
        model = self.ref_model if (reference and self.ref_model is not None) else self.model
        adapter_off = self.model.disable_adapter() if (reference and self.ref_model is None) else contextlib.nullcontext()
        with adapter_off, self.autocast():
            return response_logprobs(model, items, **self._kw())

    def train_logprobs(self, items) -> List[torch.Tensor]:
        with self.autocast():
            return response_logprobs(self.model, items, self.cfg.rollout.temperature, len(items), self.pad_id,
                                     chunk_tokens=self.chunk_tokens())

    def zero_grad(self) -> None:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        loss.backward()

    def step(self) -> float:
        params = [p for p in self.model.parameters() if p.requires_grad]
        clip = self.cfg.train.grad_clip if self.cfg.train.grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, clip)
        self.optimizer.step()
        return float(norm)

    def scheduler_step(self) -> None:
        self.scheduler.step()

    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    # ---- rollout ------------------------------------------------------------------------------------------------
    def rollout_context(self):
        """Rollouts read the model as the trainer does: under the same autocast (fp32 master weights next to bf16
        frozen ones need it)."""
        return self.autocast()

    def sync_rollout_weights(self, engine, everything: bool = False) -> None:
        """``everything``: every weight, frozen ones too (a rollout server may hold another checkpoint's)."""
        engine.sync_weights(self.model, everything=everything)

    # ---- state --------------------------------------------------------------------------------------------------
    def save(self, out_dir: str, step: int, extra: Dict[str, Any], keep: int) -> Path:
        from mmrl.train.checkpoint import save_checkpoint

        return save_checkpoint(out_dir, step, self.model, self.optimizer, self.scheduler, extra, keep=keep)

    def latest(self, out_dir: str) -> Optional[Path]:
        from mmrl.train.checkpoint import latest_checkpoint

        return latest_checkpoint(out_dir)

    def load(self, path: Path) -> Dict[str, Any]:
        from mmrl.train.checkpoint import load_checkpoint

        return load_checkpoint(Path(path), self.model, self.optimizer, self.scheduler)

    def export(self, path: str, processor) -> str:
        from mmrl.models.loading import export_merged

        if hasattr(self.model, "merge_and_unload"):
            import copy

            return export_merged(copy.deepcopy(self.model), processor, path)
        return export_merged(self.model, processor, path)
