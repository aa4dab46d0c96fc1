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
import json
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from mmrl.rollout.vllm_client import ServerClient, _int_keys, decode, encode  # noqa: F401  (ServerClient: re-exported)


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
