"""The client of vLLM server mode (``mmrl.rollout.vllm_server``) and the JSON wire format both sides speak: numpy
arrays base64-encoded, tuples tagged. ``VLLMEngine`` holds a ``ServerClient`` where it would hold a local backend."""
from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch


def encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return {"__ndarray__": base64.b64encode(np.ascontiguousarray(obj).tobytes()).decode(),
                "dtype": str(obj.dtype), "shape": list(obj.shape)}
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(x) for x in obj]}
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [encode(x) for x in obj]
    return obj


def decode(obj: Any) -> Any:
    if isinstance(obj, dict):
        if "__ndarray__" in obj:
            return np.frombuffer(base64.b64decode(obj["__ndarray__"]), dtype=obj["dtype"]).reshape(obj["shape"]).copy()
        if "__tuple__" in obj:
            return tuple(decode(x) for x in obj["__tuple__"])
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(x) for x in obj]
    return obj


def _int_keys(sampling: Dict[str, Any]) -> Dict[str, Any]:
    if sampling.get("logit_bias"):
        sampling = dict(sampling, logit_bias={int(k): v for k, v in sampling["logit_bias"].items()})
    return sampling


class ServerClient:
    """The engine side: the same methods as ``vllm_engine.LocalBackend``, over HTTP."""

    def __init__(self, url: str, timeout: float = 3600.0):
        self.url, self.timeout = url.rstrip("/"), timeout

    def _post(self, path: str, body: bytes, ctype: str = "application/json") -> Any:
        req = urllib.request.Request(self.url + path, data=body, headers={"Content-Type": ctype}, method="POST")
        from mmrl.errors import MMRLError

        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raise MMRLError(f"vLLM server at {self.url}{path} answered {e.code}: {e.read().decode()[:2000]}") from e
        except OSError as e:
            raise MMRLError(f"vLLM server at {self.url}{path}: {e} (is `python -m mmrl.rollout.vllm_server` running?)") from e

    def generate(self, prompts: List[Dict[str, Any]], sampling: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        return self._post("/generate", json.dumps(encode({"prompts": prompts, "sampling": sampling})).encode())

    def load_weights(self, weights: List[Tuple[str, torch.Tensor]]) -> None:
        from mmrl.dist import barrier, rank

        if rank() == 0:  # every trainer rank holds the same weights: one copy on the wire
            from safetensors.torch import save

            self._post("/load_weights", save({n: t.detach().cpu().contiguous() for n, t in weights}),
                       "application/octet-stream")
        barrier()

    def reset_caches(self) -> None:
        from mmrl.dist import rank

        if rank() == 0:
            self._post("/reset_caches", b"{}")

    def sleep(self, level: int) -> None:  # a server keeps its GPUs: nothing to free for the trainer
        return None

    def wake(self, tags: Optional[List[str]]) -> None:
        return None
