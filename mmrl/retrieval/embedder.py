"""An embedding model on a Qwen2.5-VL / Qwen2-VL backbone: images and retrieval states to unit vectors.

Input: ``embed_images`` encodes each image alone as ``<|vision_start|><|image_pad|>...<|vision_end|>``;
``embed_state(query, images)`` encodes the query text followed by the images retrieved so far (hop order), so the
image tokens attend to the query (causal attention). Images are resized by Qwen's ``smart_resize`` within
``[min_pixels, max_pixels]``.

Pooling (``pooling``): ``mean`` (default) averages the final hidden states ``h_i`` of the non-padding tokens,
``last`` takes the last non-padding token's ``h``; then a linear head ``W`` (``hidden -> dim``, orthogonal init,
the identity when ``dim == hidden``) and L2 normalisation: ``e = W·pool(h) / ||W·pool(h)||``, the usual
embedding-model recipe (e.g. GME / VLM2Vec use last-token pooling of a Qwen2-VL backbone plus normalisation).

Both calls are differentiable when grad is enabled (the router trains backbone, LoRA and head through them).
``Embedder.from_pretrained`` takes a Qwen checkpoint folder (or ``tiny``) or a folder written by ``save``
(``embedder.json`` + ``head.pt`` + the backbone's state as LoRA adapter or full weights).
"""
from __future__ import annotations

import json
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

POOLINGS = ("mean", "last")
IMAGE_TOKENS = "<|vision_start|><|image_pad|><|vision_end|>"


def _to_tensor(image) -> torch.Tensor:
    """``uint8 [3, H, W]`` from a PIL image or a tensor."""
    if isinstance(image, torch.Tensor):
        return image.to(torch.uint8)
    return torch.from_numpy(np.asarray(image.convert("RGB")).copy()).permute(2, 0, 1)


class Embedder(nn.Module):
    def __init__(self, model: nn.Module, processor, dim: Optional[int] = None, pooling: str = "mean",
                 min_pixels: int = 28 * 28, max_pixels: int = 112 * 112, backbone_path: str = ""):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        if not 28 * 28 <= min_pixels <= max_pixels:
            raise ValueError(f"need 784 <= min_pixels <= max_pixels, got {min_pixels} and {max_pixels}")
        self.model, self.processor, self.pooling = model, processor, pooling
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        self.backbone_path = backbone_path  # the Qwen checkpoint under the head (``tiny`` or a folder)
        hidden = self._config().text_config.hidden_size
        self.dim = int(dim or hidden)
        self.head = nn.Linear(hidden, self.dim, bias=False)
        with torch.no_grad():
            if self.dim == hidden:
                self.head.weight.copy_(torch.eye(hidden))
            else:
                nn.init.orthogonal_(self.head.weight)
        self.processor.tokenizer.padding_side = "right"

    def _config(self):
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        return base.config

    def _backbone(self) -> nn.Module:
        """The ``Qwen2_5_VLModel`` (vision tower + language model, no LM head) under any peft wrapper."""
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        return base.model

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    # ------------------------------------------------------------------ encoding
    def _images(self, images: Sequence) -> List[torch.Tensor]:
        from mmrl.media.decode import _resize
        from mmrl.media.inputs import resize_factor

        f = resize_factor(self.processor)  # the backbone's patch x merge size (32: Qwen3-VL)
        return [_resize(_to_tensor(im).unsqueeze(0), self.min_pixels, self.max_pixels, f)[0] for im in images]

    def _forward(self, texts: List[str], images: List[torch.Tensor]) -> torch.Tensor:
        kwargs = {"images": images, "do_resize": False} if images else {}
        batch = self.processor(text=texts, padding=True, return_tensors="pt", **kwargs)
        mask = batch["attention_mask"].to(self.device)
        inputs = {k: v.to(self.device) for k, v in batch.items() if k in ("input_ids", "pixel_values", "image_grid_thw")}
        hidden = self._backbone()(**inputs, attention_mask=mask, use_cache=False).last_hidden_state
        if self.pooling == "mean":
            m = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)
        else:
            pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), mask.sum(1) - 1]
        out = self.head(pooled.to(self.head.weight.dtype))
        return nn.functional.normalize(out, dim=-1)

    def embed_images(self, images: Sequence, batch_size: int = 32) -> torch.Tensor:
        """``[N, dim]`` unit vectors, one per image (each encoded alone)."""
        if not len(images):
            return torch.zeros(0, self.dim, device=self.device)
        chunks = []
        for i in range(0, len(images), batch_size):
            part = self._images(images[i:i + batch_size])
            chunks.append(self._forward([IMAGE_TOKENS] * len(part), part))
        return torch.cat(chunks)

    def embed_states(self, states: Sequence[Tuple[str, Sequence]]) -> torch.Tensor:
        """``[B, dim]``: one unit vector per ``(query, images retrieved so far)``; the query first, then the
        images in hop order."""
        texts, flat = [], []
        for query, images in states:
            texts.append(query + IMAGE_TOKENS * len(images))
            flat.extend(images)
        return self._forward(texts, self._images(flat))

    def embed_state(self, query: str, images: Sequence = ()) -> torch.Tensor:
        """``[dim]``: the unit vector of the state ``(query, images retrieved so far)``."""
        return self.embed_states([(query, images)])[0]

    def embed_texts(self, texts: Sequence[str]) -> torch.Tensor:
        """``[N, dim]``: text-only states (the single-step retriever's query embeddings)."""
        return self.embed_states([(t, ()) for t in texts])

    # ------------------------------------------------------------------ loading and saving
    @classmethod
    def from_pretrained(cls, path: str, dim: Optional[int] = None, pooling: Optional[str] = None, lora=None,
                        freeze_vision: bool = False, dtype: str = "float32", device: Optional[str] = None,
                        min_pixels: Optional[int] = None, max_pixels: Optional[int] = None) -> "Embedder":
        """A Qwen2.5-VL / Qwen2-VL checkpoint (``tiny`` = the embedded tiny model) with a fresh head, LoRA through
        peft when ``lora`` (an ``mmrl.config.LoraConfig``-like object) is enabled; or a saved embedder folder
        (its ``embedder.json`` fixes ``dim``, ``pooling``, LoRA and pixels: giving them too is a ``ValueError``).
        Defaults for a checkpoint: ``dim`` = hidden size, ``pooling="mean"``, pixels 784..12544."""
        from mmrl.models.loading import load_model, load_processor

        if os.path.isfile(os.path.join(path, "embedder.json")):
            given = {k: v for k, v in dict(dim=dim, pooling=pooling, lora=lora, min_pixels=min_pixels,
                                           max_pixels=max_pixels).items() if v is not None}
            if given:
                raise ValueError(f"{path} is a saved embedder: its embedder.json fixes {', '.join(sorted(given))}")
            return cls._load_saved(path, device)
        model = load_model(path, dtype=dtype, freeze_vision=freeze_vision, lora=lora, device=device)
        emb = cls(model, load_processor(path), dim=dim, pooling=pooling or "mean", min_pixels=min_pixels or 28 * 28,
                  max_pixels=max_pixels or 112 * 112, backbone_path=path)
        return emb.to(device) if device else emb

    def save(self, out_dir: str) -> str:
        """Write ``embedder.json``, ``head.pt`` and the backbone (its LoRA adapter, or its full weights)."""
        os.makedirs(out_dir, exist_ok=True)
        lora = hasattr(self.model, "get_base_model")
        src = self.backbone_path
        meta = {"backbone": os.path.abspath(src) if src not in ("", "tiny") else src,
                "dim": self.dim, "pooling": self.pooling, "min_pixels": self.min_pixels,
                "max_pixels": self.max_pixels, "lora": lora}
        if lora:
            self.model.save_pretrained(os.path.join(out_dir, "adapter"))
        else:
            self.model.save_pretrained(os.path.join(out_dir, "backbone"))
            meta["backbone"] = "backbone"
        self.processor.save_pretrained(os.path.join(out_dir, "processor"))
        torch.save(self.head.state_dict(), os.path.join(out_dir, "head.pt"))
        with open(os.path.join(out_dir, "embedder.json"), "w") as f:
            json.dump(meta, f, indent=1)
        return out_dir

    @classmethod
    def _load_saved(cls, path: str, device: Optional[str]) -> "Embedder":
        from mmrl.models.loading import load_model, load_processor

        with open(os.path.join(path, "embedder.json")) as f:
            meta = json.load(f)
        backbone = meta["backbone"] if meta["backbone"] == "tiny" or os.path.isabs(meta["backbone"]) \
            else os.path.join(path, meta["backbone"])
        model = load_model(backbone, device=device)
        if meta["lora"]:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, os.path.join(path, "adapter"), is_trainable=True)
        emb = cls(model, load_processor(os.path.join(path, "processor")), dim=meta["dim"], pooling=meta["pooling"],
                  min_pixels=meta["min_pixels"], max_pixels=meta["max_pixels"], backbone_path=backbone)
        emb.head.load_state_dict(torch.load(os.path.join(path, "head.pt"), map_location="cpu"))
        return emb.to(device) if device else emb
