"""vLLM server mode: a ``vllm.LLM`` in its own process (its own GPUs), spoken to over HTTP by ``VLLMEngine``.

    CUDA_VISIBLE_DEVICES=7 python -m mmrl.rollout.vllm_server --model /ckpt/Qwen2.5-VL-7B-Instruct --port 8000
    ... mmrl train ... rollout.engine=vllm rollout.vllm_mode=server   # MMRL_VLLM_SERVER=http://host:8000

Endpoints (POST): ``/generate`` (JSON: the engine's prompt and sampling dicts, numpy arrays base64-encoded),
``/load_weights`` (a safetensors blob of HF-named tensors), ``/reset_caches``, ``/sleep``, ``/wake``,
``/health``. The weights travel over HTTP from trainer rank 0 after every step: simple, and fine for LoRA-sized
updates or one node; a full 7B update costs ~15 GB per step on the wire (an NCCL path is future work).
The transport is plain stdlib + safetensors, so it is tested on CPU with a stand-in backend.
"""
from __future__ import annotations

import argparse
import base64
import json
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
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


def make_handler(backend):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            return None

        def _reply(self, obj: Any, code: int = 200) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # noqa: N802
            data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                if self.path == "/generate":
                    req = decode(json.loads(data))
                    return self._reply(backend.generate(req["prompts"], [_int_keys(s) for s in req["sampling"]]))
                if self.path == "/load_weights":
                    from safetensors.torch import load

                    backend.load_weights(list(load(data).items()))
                elif self.path == "/reset_caches":
                    backend.reset_caches()
                elif self.path == "/health":
                    pass
                else:
                    return self._reply({"error": f"unknown endpoint {self.path}"}, 404)
                return self._reply({"ok": True})
            except Exception as e:  # report to the client instead of dying
                return self._reply({"error": f"{type(e).__name__}: {e}"}, 500)

    return Handler


def serve(backend, host: str = "127.0.0.1", port: int = 8000) -> HTTPServer:
    """An HTTP server around ``backend`` (call ``serve_forever()`` on it); one request at a time."""
    return HTTPServer((host, port), make_handler(backend))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-media-per-prompt", type=int, default=1,
                   help="images (and videos) one prompt may hold: multi-turn tool runs need the suite's max_calls + 1")
    a = p.parse_args(argv)
    from mmrl.rollout.vllm_engine import LocalBackend, _check_colocate

    _check_colocate()
    backend = LocalBackend(a.model, a.gpu_memory_utilization, a.dtype, a.seed, a.max_model_len, a.max_media_per_prompt)
    print(f"[mmrl] vLLM server for {a.model} on http://{a.host}:{a.port}", flush=True)
    serve(backend, a.host, a.port).serve_forever()


if __name__ == "__main__":
    main()
