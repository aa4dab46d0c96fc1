"""A random-init checkpoint at the full published shape of Qwen2.5-VL-3B-Instruct, in bf16 (~7.5 GB), for timing a
weight load the way a real run pays it (``bench/fail_fast.py``). No hub access: the shape is written out (in ``mmrl.train.device_check``).

The sizes are those of Qwen/Qwen2.5-VL-3B-Instruct's ``config.json`` (text: hidden 2048, 36 layers, 16 heads, 2 KV
heads, MLP 11008, vocabulary 151936, tied embeddings, rope theta 1e6, mrope [16, 24, 24]; vision: 32 blocks of width
1280, 16 heads, MLP 3420, full attention in blocks 7, 15, 23, 31, window 112), as in
``tests/models/test_real_shapes.py`` but at full depth (``mmrl.train.device_check.QWEN2_5_VL_3B``, with Qwen2's
real tokenizer here); they were not re-read from the hub here.

    python bench/_real_checkpoint.py /tmp/prefail_3b
"""
from __future__ import annotations

import dataclasses
import sys
import time

from mmrl.models.tiny import TinySpec
from mmrl.train import device_check

QWEN2_5_VL_3B = dataclasses.replace(device_check.QWEN2_5_VL_3B, tokenizer="qwen", max_pixels=None)
# Qwen/Qwen2.5-VL-7B-Instruct's config.json: text hidden 3584, 28 layers, 28 heads, 4 KV heads, MLP 18944, vocabulary
# 152064, untied embeddings; the same vision tower as the 3B (as tests/models/test_real_shapes.py; not re-read here)
QWEN2_5_VL_7B = dataclasses.replace(QWEN2_5_VL_3B, text_hidden=3584, text_layers=28, text_heads=28, text_kv_heads=4,
                                    text_intermediate=18944, vocab_size=152064, tie_embeddings=False)


def write_real_checkpoint(out: str, spec: TinySpec = QWEN2_5_VL_3B) -> None:
    """Build the model on the meta device, materialise it in bf16 with N(0, 0.02) weights (norms at 1), save it with
    its processor. Peak memory ~ one bf16 copy (7.5 GB for 3B), not the fp32 init's 15 GB."""
    import torch

    from mmrl.models import hub_layout
    from mmrl.models.chat_template import chat_template_for
    from mmrl.models.loading import model_class_for
    from mmrl.models.qwen_tokenizer import build_qwen_tokenizer
    from mmrl.models.tiny import build_config, build_processor

    tok = build_qwen_tokenizer(chat_template_for(spec.family))
    processor = build_processor(tok, spec)
    config = build_config(tok, spec)
    config.dtype = torch.bfloat16
    with torch.device("meta"):
        model = model_class_for(spec.family)(config)
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    model.tie_weights()  # to_empty gives every module its own tensor: tie lm_head to the embedding again
    g = torch.Generator().manual_seed(spec.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0 if "norm" in name else 0.0)
            else:
                p.normal_(0.0, 0.02, generator=g)
    model.generation_config.eos_token_id = tok.convert_tokens_to_ids("<|im_end|>")
    model.generation_config.pad_token_id = tok.convert_tokens_to_ids("<|endoftext|>")
    hub_layout.save_pretrained(model, out)
    processor.save_pretrained(out)


if __name__ == "__main__":
    t = time.time()
    write_real_checkpoint(sys.argv[1])
    print(f"wrote {sys.argv[1]} in {time.time() - t:.0f} s")
