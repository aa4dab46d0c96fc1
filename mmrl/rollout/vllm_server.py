"""The rollout server: vLLM's ``AsyncLLM`` behind a FastAPI app (uvicorn), for ``rollout.vllm_mode: server``.

    MMRL_ROLLOUT_SECRET=... CUDA_VISIBLE_DEVICES=7 python -m mmrl.rollout.vllm_server --model /ckpt/Qwen2.5-VL-7B-Instruct --port 8000
    MMRL_ROLLOUT_SECRET=... mmrl train ... rollout.engine=vllm rollout.vllm_mode=server 'rollout.servers=[http://host:8000]'

Why not ``vllm serve``: its token-in endpoint ``/inference/v1/generate`` (vLLM 0.32) takes multimodal input only as
``content_parts`` (image/video URLs, fetched and decoded by the server) or ``features`` (vLLM-serialized processor
outputs from ``/v1/chat/completions/render``). Neither carries mmrl's prompt: the exact decoded frames the trainer
scores, already resized (``do_resize=False``), with each video's fps metadata (``mmrl.rollout.vllm_inputs``);
re-encoding them as media files would change the pixels and the frame sampling. So this thin server takes the very
``TokensPrompt`` dicts the colocated engine builds.

Endpoints (every POST needs ``Authorization: Bearer $MMRL_ROLLOUT_SECRET`` when a secret is set; 401 otherwise):

- ``GET /health``: the served model and how many prompts and weight syncs it has served (no secret: it changes
  nothing);
- ``POST /generate``: ``{"prompts", "sampling", "samples"}`` (numpy arrays base64-encoded, ``vllm_client.encode``);
  each prompt is its own ``AsyncLLM.generate`` request, so the requests of every trainer rank are batched together
  by vLLM's scheduler (continuous batching). A failing prompt answers 400 naming its sample;
- ``POST /weights/init``: join the trainer's weight-transfer group (``mmrl.rollout.transfer_group``);
- ``POST /weights/update``: receive a sync's buckets over that group (``{"manifests"}``) and reload in place;
- ``POST /weights/load``: the HTTP fallback, a safetensors blob in the body;
- ``POST /reset_caches``: prefix (KV), multimodal-processor and encoder caches, after a weight update.

The server binds loopback unless told otherwise, and refuses a non-loopback address without a secret.
"""

import argparse
import asyncio
import os
import secrets
import uuid
from typing import Any, Dict, List, Optional

from mmrl.rollout.vllm_client import SECRET_ENV, is_loopback


def build_app(engine, model: str, secret: Optional[str]):
    """The FastAPI app around ``engine`` (an ``AsyncLLM`` built with ``WeightReceiver`` as worker extension)."""
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.responses import JSONResponse
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    from mmrl.rollout.vllm_client import _int_keys, decode
    from mmrl.rollout.vllm_engine import output_dict

    def authorized(request: Request) -> None:
        if secret is None:
            return
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {secret}".encode()):
            raise HTTPException(status_code=401, detail=f"missing or wrong secret (${SECRET_ENV}) for {request.url.path}")

    app = FastAPI(title="mmrl rollout server")
    guarded = [Depends(authorized)]
    served = {"prompts": 0, "syncs": 0}

    @app.get("/health")
    async def health() -> Dict[str, Any]:
        return {"ok": True, "model": model, **served}

    async def one(prompt: Dict[str, Any], sampling: Dict[str, Any]) -> Dict[str, Any]:
        # FINAL_ONLY: one output holding all n completions (streamed outputs of an n > 1 request carry one child each)
        params = SamplingParams(**_int_keys(sampling), output_kind=RequestOutputKind.FINAL_ONLY)
        final = None
        async for out in engine.generate(prompt, params, request_id=uuid.uuid4().hex):
            final = out
        return output_dict(final)

    @app.post("/generate", dependencies=guarded)
    async def generate(request: Request):
        body = decode(await request.json())
        samples: List[str] = body.get("samples") or [str(i) for i in range(len(body["prompts"]))]
        served["prompts"] += len(samples)
        results = await asyncio.gather(*(one(p, s) for p, s in zip(body["prompts"], body["sampling"])),
                                       return_exceptions=True)
        for sample, res in zip(samples, results):
            if isinstance(res, BaseException):
                return JSONResponse({"error": f"sample '{sample}': {type(res).__name__}: {res}"}, status_code=400)
        return results

    @app.post("/weights/init", dependencies=guarded)
    async def weights_init(request: Request):
        body = await request.json()
        await engine.collective_rpc("mmrl_join", kwargs={k: body[k] for k in
                                                         ("host", "port", "rank", "world_size", "timeout_s", "backend")})
        return {"ok": True, "rank": body["rank"]}

    @app.post("/weights/update", dependencies=guarded)
    async def weights_update(request: Request):
        body = await request.json()
        counts = await engine.collective_rpc("mmrl_receive", kwargs={"manifests": body["manifests"]})
        served["syncs"] += 1
        return {"ok": True, "tensors": counts[0]}

    @app.post("/weights/load", dependencies=guarded)
    async def weights_load(request: Request):
        counts = await engine.collective_rpc("mmrl_load_blob", kwargs={"blob": await request.body()})
        served["syncs"] += 1
        return {"ok": True, "tensors": counts[0]}

    @app.post("/reset_caches", dependencies=guarded)
    async def reset_caches():
        if await engine.reset_prefix_cache() is False:
            return JSONResponse({"error": "vLLM refused to reset its prefix cache (requests still running)"}, 409)
        await engine.reset_mm_cache()
        await engine.reset_encoder_cache()
        return {"ok": True}

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception):  # the client gets the reason, the server keeps serving
        return JSONResponse({"error": f"{request.url.path}: {type(exc).__name__}: {exc}"}, status_code=500)

    return app


def engine_args(a) -> Dict[str, Any]:
    """``AsyncEngineArgs`` keywords: the colocated engine's settings (``LocalBackend``) plus the worker extension."""
    kwargs: Dict[str, Any] = dict(model=a.model, dtype=a.dtype, seed=a.seed, max_model_len=a.max_model_len,
                                  enable_prefix_caching=True, logprobs_mode="processed_logprobs",
                                  limit_mm_per_prompt={"image": a.max_media_per_prompt, "video": a.max_media_per_prompt},
                                  worker_extension_cls="mmrl.rollout.server_worker.WeightReceiver",
                                  enforce_eager=a.enforce_eager)
    from mmrl.rollout.vllm_platform import is_cpu_platform

    if is_cpu_platform():
        if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kwargs["kv_cache_memory_bytes"] = int(a.kv_cache_gib * 2**30)
    else:
        kwargs["gpu_memory_utilization"] = a.gpu_memory_utilization
    return kwargs


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--kv-cache-gib", type=float, default=1.0, help="vLLM's CPU build: KV cache size")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--max-media-per-prompt", type=int, default=1,
                   help="images (and videos) one prompt may hold: multi-turn tool runs need the suite's max_calls + 1")
    a = p.parse_args(argv)
    secret = os.environ.get(SECRET_ENV) or None
    if secret is None and not is_loopback(a.host):
        raise SystemExit(f"refusing to listen on {a.host} without a secret: set {SECRET_ENV} (the trainer sends it)")
    import uvicorn
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args(a)))
    print(f"[mmrl] rollout server for {a.model} on http://{a.host}:{a.port} "
          f"({'secret required' if secret else 'no secret: loopback only'})", flush=True)
    uvicorn.run(build_app(engine, a.model, secret), host=a.host, port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
