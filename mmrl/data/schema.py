"""Core data objects that flow through one RL step (see DESIGN.md).

``Sample`` -> ``Media`` (decoded once per step) -> ``View`` -> ``Trajectory``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

if TYPE_CHECKING:  # annotations only: the annotation loader and the data pre-flight import no torch
    import torch

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass
class VideoRef:
    """A video on disk (an MP4 file or a folder of JPEG frames) with its sampling budget."""

    path: str
    start: Optional[float] = None  # seconds; None = from the beginning
    end: Optional[float] = None  # seconds; None = to the end
    fps: Optional[float] = None  # sample at this rate ...
    nframes: Optional[int] = None  # ... or exactly this many frames (takes precedence)
    max_pixels: Optional[int] = None  # per-frame pixel budget
    frame_fps: Optional[float] = None  # for JPEG frame folders: their rate (MVBench uses 3)


@dataclass
class ImageRef:
    path: str
    max_pixels: Optional[int] = None


@dataclass
class Evidence:
    """Where the answer lives: time segments in seconds and per-frame target boxes.

    ``boxes`` maps a time in seconds (of the source video) to ``[x0, y0, x1, y1]`` in pixels of the source frame.
    """

    segments: List[Tuple[float, float]] = field(default_factory=list)
    boxes: List[Tuple[float, List[float]]] = field(default_factory=list)
    source_size: Optional[Tuple[int, int]] = None  # (width, height) the boxes refer to


ANSWER_TYPES = ("choice", "text", "number", "list")


@dataclass
class Sample:
    """One prompt. ``answer_type`` says what ``answer`` is: ``choice`` (default; a candidate's text, the gold letter
    is its index in ``candidates``), ``text`` (free text), ``number`` (a float) or ``list`` (of strings). Rewards
    and benchmarks name the verifier that compares a response with it (``mmrl.rewards.verifiers``)."""

    id: str
    question: str
    candidates: List[str]
    answer: Any
    qtype: str = "generic"
    video: Optional[VideoRef] = None
    image: Optional[ImageRef] = None
    evidence: Evidence = field(default_factory=Evidence)
    meta: Dict[str, Any] = field(default_factory=dict)
    answer_type: str = "choice"

    @property
    def is_choice(self) -> bool:
        return self.answer_type == "choice"

    @property
    def answer_index(self) -> int:
        if not self.is_choice:
            raise ValueError(f"sample '{self.id}' has a {self.answer_type} answer, not a choice among candidates")
        return self.candidates.index(self.answer)

    @property
    def expected_letter(self) -> Optional[str]:
        """The gold letter for multiple choice; ``None`` for open answers (a verifier reads ``answer`` itself)."""
        return self.answer_letter if self.is_choice else None

    @property
    def answer_letter(self) -> str:
        return LETTERS[self.answer_index]

    @property
    def letters(self) -> str:
        return LETTERS[: len(self.candidates)]


@dataclass
class Media:
    """Decoded media of one sample: video frames ``uint8 [T, C, H, W]`` with timestamps, or one image ``[C, H, W]``."""

    sample_id: str
    frames: Optional[torch.Tensor] = None
    timestamps: Optional[List[float]] = None
    image: Optional[torch.Tensor] = None
    source_size: Optional[Tuple[int, int]] = None  # (width, height) of the source before resizing
    fps: Optional[float] = None  # rate the frames were sampled at (for M-RoPE time ids)

    @property
    def is_video(self) -> bool:
        return self.frames is not None


ANSWER_UNCHANGED = "unchanged"
ANSWER_ABSTAIN = "abstain"
ANSWER_UNKNOWN = "unknown"


@dataclass
class View:
    """One view of a sample's media. ``expected`` is the gold letter under the view, ``"abstain"`` or ``None`` (unknown)."""

    name: str
    role: str
    media: Media
    expected: Optional[str]
    transform: str = "identity"
    weight: float = 1.0  # scales the advantage of this view's responses (the view set's ``weight``)
    pixels_differ: Optional[bool] = None  # False: the transform left the anchor's pixels as they were


@dataclass
class Segment:
    """One stretch of a multi-turn trajectory after the prompt: the model's tokens (trained, ``kind="model"``) or
    an environment/tool observation (masked, ``kind="env"``), the latter with the vision tensors of the media it
    inserts (its ``<|image_pad|>``/``<|video_pad|>`` tokens are in ``ids``)."""

    kind: str  # "model" | "env"
    ids: torch.Tensor  # [L] long
    logprobs: Optional[torch.Tensor] = None  # [L] sampling log-probs (model segments)
    mm_token_type_ids: Optional[torch.Tensor] = None  # [L]: 0 text, 1 image, 2 video
    vision: Dict[str, torch.Tensor] = field(default_factory=dict)  # pixel_values(_videos), *_grid_thw, ...
    text: str = ""
    media: Optional["Media"] = field(default=None, repr=False)  # the decoded frames/image the observation showed

    @property
    def trained(self) -> bool:
        return self.kind == "model"


@dataclass
class Trajectory:
    """One response to one (sample, view) prompt.

    Single-turn: ``response_ids`` are the model's tokens, ``loss_mask`` all ones, ``segments`` empty, and the
    scorer reads the prompt's inputs (``inputs_key``). Multi-turn (``mmrl.rollout.agent_loop_multi``):
    ``response_ids`` is everything after the prompt, the concatenated ``segments`` (model turns and
    observations), ``loss_mask`` is true on model tokens only, ``logprobs`` are 0 on observation tokens, and
    ``sequence`` holds the processor inputs of the whole interleaved sequence (all media), which the scorer
    forwards in one pass (``mmrl.models.sequence_scoring``).
    """

    sample_id: str
    group_id: int  # index of the prompt group in the batch
    view: str
    role: str
    prompt_ids: torch.Tensor  # [P] long
    response_ids: torch.Tensor  # [R] long (ends with EOS when the model stopped)
    logprobs: torch.Tensor  # [R] float, sampling log-probs under the rollout policy
    loss_mask: torch.Tensor  # [R] bool: tokens trained on (tool outputs masked out)
    text: str
    truncated: bool = False
    turns: List[Dict[str, Any]] = field(default_factory=list)
    rewards: Dict[str, float] = field(default_factory=dict)
    expected: Optional[str] = None
    inputs_key: int = 0  # index into the rollout batch's multimodal inputs (one per prompt/view)
    pack_id: int = 0  # j-th response of every view of a sample forms pack j (BPO)
    view_weight: float = 1.0  # the view's ``weight`` (scales its advantage)
    rescored: Dict[str, torch.Tensor] = field(default_factory=dict)  # intervention -> [R] log-probs (fixed rollout)
    segments: List[Segment] = field(default_factory=list)  # multi-turn: model turns and observations, in order
    sequence: Optional[Any] = field(default=None, repr=False)  # multi-turn: SequenceInputs of prompt + response

    def scoring_item(self, prompts: List[Any]) -> Tuple[Any, torch.Tensor]:
        """``(inputs, response_ids)`` for ``mmrl.models.scoring.response_logprobs``: the whole sequence's inputs
        for a multi-turn trajectory, else its prompt's inputs ``prompts[inputs_key]``."""
        return (self.sequence if self.sequence is not None else prompts[self.inputs_key]), self.response_ids
