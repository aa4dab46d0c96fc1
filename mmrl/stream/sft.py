"""Masked SFT from the world oracle's streams: the warm start of Stream-GDPO (WTI, specs/algorithms.md §5).

Each stream sample (a block, ``mmrl.stream.block``) becomes the oracle's episode rendered as a multi-turn trajectory
(``mmrl.stream.loop.teacher_trajectory``: the teacher's think updates, actions, recalls and memory lines as model
turns; chunks, recalled frames and questions as masked observations). ``mmrl.train.sft`` trains on it with the
cross-entropy of the teacher's own tokens only: ``L = −Σ_t m_t log π(y_t | y_<t, observations) / Σ_t m_t``.
"""
from __future__ import annotations

from typing import Callable, Tuple

import torch

from mmrl.data.schema import Sample
from mmrl.stream.config import DEFAULT_PATH, load_stream_config
from mmrl.stream.loop import teacher_trajectory

Item = Tuple[object, torch.Tensor, torch.Tensor]


def teacher_item_builder(cfg, processor) -> Callable[[Sample], Item]:
    """``sample -> (SequenceInputs, response_ids, loss_mask)`` of the oracle's episode on the sample's block, with
    the run's stream settings (``rollout.tools``, default ``tools/streaming.yaml``)."""
    stream_cfg = load_stream_config(cfg.rollout.tools or DEFAULT_PATH)

    def item(sample: Sample) -> Item:
        t = teacher_trajectory(processor, [sample], stream_cfg)[0]
        return t.sequence, t.response_ids, t.loss_mask

    return item
