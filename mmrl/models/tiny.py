"""The embedded tiny Qwen2.5-VL: real ``transformers`` classes at tiny sizes, random init, built from a config.

``make_tiny_model(out_dir)`` writes a checkpoint that loads exactly like a hub one
(``Qwen2_5_VLForConditionalGeneration.from_pretrained`` + ``AutoProcessor.from_pretrained``):
a byte-level BPE tokenizer trained with ``tokenizers`` on the synthetic worlds' vocabulary plus
Qwen's special tokens, and Qwen's chat template.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from mmrl.models.chat_template import QWEN_VL_CHAT_TEMPLATE

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


@dataclass
class TinySpec:
    text_hidden: int = 128
    text_layers: int = 2
    text_heads: int = 4
    text_kv_heads: int = 2
    text_intermediate: int = 256
    vision_hidden: int = 64
    vision_layers: int = 2
    vision_heads: int = 2
    vision_intermediate: int = 128
    bpe_vocab: int = 600
    max_positions: int = 4096
    min_pixels: int = 28 * 28
    max_pixels: int = 112 * 112
    seed: int = 0


def build_tokenizer(vocab_size: int):
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
    fast.chat_template = QWEN_VL_CHAT_TEMPLATE
    return fast


def build_processor(tokenizer, spec: TinySpec):
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    size = {"shortest_edge": spec.min_pixels, "longest_edge": spec.max_pixels}
    image_processor = Qwen2VLImageProcessor(size=size, patch_size=14, merge_size=2, temporal_patch_size=2)
    video_processor = Qwen2VLVideoProcessor(size=size, patch_size=14, merge_size=2, temporal_patch_size=2)
    return Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=QWEN_VL_CHAT_TEMPLATE,
    )


def build_config(tokenizer, spec: TinySpec):
    from transformers import Qwen2_5_VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    head_dim = spec.text_hidden // spec.text_heads
    half = head_dim // 2  # mrope_section splits the rotary half-dimension into (time, height, width)
    t_sec = half // 4
    mrope = [t_sec, (half - t_sec) // 2, half - t_sec - (half - t_sec) // 2]
    return Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=spec.text_hidden,
            intermediate_size=spec.text_intermediate,
            num_hidden_layers=spec.text_layers,
            num_attention_heads=spec.text_heads,
            num_key_value_heads=spec.text_kv_heads,
            max_position_embeddings=spec.max_positions,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope},
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
        ),
        vision_config=dict(
            depth=spec.vision_layers,
            hidden_size=spec.vision_hidden,
            intermediate_size=spec.vision_intermediate,
            num_heads=spec.vision_heads,
            out_hidden_size=spec.text_hidden,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=112,
            fullatt_block_indexes=[spec.vision_layers - 1],
            tokens_per_second=2,
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )


def make_tiny_model(out_dir: str | os.PathLike, spec: TinySpec | None = None) -> Path:
    """Build and ``save_pretrained`` the tiny model, tokenizer and processor into ``out_dir``."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    spec = spec or TinySpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec.bpe_vocab)
    processor = build_processor(tokenizer, spec)
    config = build_config(tokenizer, spec)
    torch.manual_seed(spec.seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = config.text_config.eos_token_id
    model.generation_config.pad_token_id = config.text_config.pad_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
    (out / "mmrl_tiny_spec.json").write_text(json.dumps(asdict(spec), indent=2))
    return out


def default_tiny_path() -> Path:
    """Cache folder of the automatically built tiny model (``MMRL_CACHE`` or ``~/.cache/mmrl``)."""
    root = Path(os.environ.get("MMRL_CACHE", Path.home() / ".cache" / "mmrl"))
    return root / f"tiny-qwen2_5_vl-v1"


def ensure_tiny_model() -> Path:
    path = default_tiny_path()
    if not (path / "mmrl_tiny_spec.json").exists():
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        make_tiny_model(tmp)
        try:
            os.replace(tmp, path)
        except OSError:  # another process won the race
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return path
