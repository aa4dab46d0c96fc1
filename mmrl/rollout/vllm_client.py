"""The client of vLLM server mode (``mmrl.rollout.vllm_server``) and the JSON wire format both sides speak: numpy
arrays base64-encoded, tuples tagged. ``VLLMEngine`` holds a ``ServerClient`` where it would hold a local backend.

Several servers (``rollout.servers``): a call's requests are spread by prompt group, group ``g`` to server
``g mod N`` (a group is never split; every trainer rank reaches every server, whose vLLM batches them together).
Sampling is seeded per request (``req.meta["seed"]``), so the responses do not depend on the number of servers.
Every request waits at most ``timeout`` seconds: a dead or hanging server raises ``RolloutServerError`` naming it.

Weights (``sync_weights``): trainer rank 0 sends them to every server, through the transfer group (``transfer=
"collective"``, joined at the first sync: ``mmrl.rollout.transfer_group``; the servers load them in place:
``mmrl.rollout.server_worker``) or, as a fallback, as a safetensors blob over HTTP (``transfer="http"``).
The transfer group's address: ``$MMRL_TRANSFER_ADDR`` (``host:port``), else the address this host uses to reach the
first server and a free port.
"""
from __future__ import annotations

import base64
import ipaddress
import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from mmrl.errors import MMRLError
from mmrl.rollout.weight_sync import BUCKET_BYTES, SyncWeights


SECRET_ENV = "MMRL_ROLLOUT_SECRET"  # the launcher's secret: servers require it, clients send it (never in a config)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


class RolloutServerError(MMRLError):
    """A rollout server that refused the connection, answered nothing within the timeout, or failed."""


class ServerClient:
    """The engine side: the same methods as ``vllm_engine.LocalBackend``, over HTTP, to one or more servers."""

    def __init__(self, urls, timeout: float = 600.0, secret: Optional[str] = None, transfer: str = "collective",
                 bucket_bytes: int = BUCKET_BYTES, transfer_backend: Optional[str] = None):
        self.urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls)]
        self.timeout, self.transfer, self.bucket_bytes = timeout, transfer, bucket_bytes
        self.secret = secret if secret is not None else (os.environ.get(SECRET_ENV) or None)
        self.transfer_backend = transfer_backend or ("nccl" if torch.cuda.is_available() else "gloo")
        self.group = None
        self.pool = ThreadPoolExecutor(max_workers=2 * len(self.urls))
        for url in self.urls:  # fail before the first step, not inside it
            self._call(url, "/health", None, method="GET", timeout=min(timeout, 30.0))

    def _call(self, url: str, path: str, body: Optional[bytes], ctype: str = "application/json",
              method: str = "POST", timeout: Optional[float] = None) -> Any:
        headers = {"Content-Type": ctype}
        if self.secret:
            headers["Authorization"] = f"Bearer {self.secret}"
        req = urllib.request.Request(url + path, data=body, headers=headers, method=method)
        limit = timeout or self.timeout
        try:
            with urllib.request.urlopen(req, timeout=limit) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            text = e.read().decode()[:2000]
            try:
                text = json.loads(text).get("error") or json.loads(text).get("detail") or text
            except (ValueError, AttributeError):
                pass
            raise MMRLError(f"rollout server {url}{path} answered {e.code}: {text}") from e
        except (OSError, TimeoutError) as e:  # refused, reset, or nothing within the timeout
            raise RolloutServerError(f"rollout server {url}{path} failed ({type(e).__name__}: {e}) within the "
                                     f"{limit:.0f} s timeout (rollout.server_timeout_s): is it running and reachable?") from e

    def _all(self, fn, *args_per_url) -> List[Any]:
        """``fn(url, *args)`` on every server at once; the first failure is raised after all have returned."""
        futures = [self.pool.submit(fn, url, *args) for url, *args in zip(self.urls, *args_per_url)]
        results, error = [], None
        for f in futures:
            try:
                results.append(f.result())
            except Exception as e:  # noqa: BLE001  (re-raised below)
                error = error or e
                results.append(None)
        if error is not None:
            raise error
        return results

    def server_of(self, groups: Optional[List[Any]], count: int) -> List[int]:
        """The server of each request: group ``g`` -> ``g mod N`` (non-integer ids by first appearance)."""
        if groups is None:
            groups = list(range(count))
        order: Dict[Any, int] = {}
        out = []
        for g in groups:
            key = g if isinstance(g, int) else order.setdefault(g, len(order))
            out.append(key % len(self.urls))
        return out

    def generate(self, prompts: List[Dict[str, Any]], sampling: List[Dict[str, Any]], groups=None,
                 samples: Optional[List[str]] = None) -> List[Dict[str, Any]]:
        where = self.server_of(groups, len(prompts))
        samples = samples or [str(i) for i in range(len(prompts))]
        parts = [[i for i, s in enumerate(where) if s == k] for k in range(len(self.urls))]

        def post(url, idx):
            if not idx:
                return []
            body = {"prompts": [prompts[i] for i in idx], "sampling": [sampling[i] for i in idx],
                    "samples": [samples[i] for i in idx]}
            return self._call(url, "/generate", json.dumps(encode(body)).encode())

        out: List[Any] = [None] * len(prompts)
        for idx, res in zip(parts, self._all(post, parts)):
            for i, r in zip(idx, res):
                out[i] = r
        return out

    # ---- weights ------------------------------------------------------------------------------------------------
    def load_weights(self, weights: SyncWeights) -> None:
        """Rank 0 sends (every trainer rank holds the same weights); under ZeRO-3 every rank walks the buckets with
        it, since each bucket's gather is collective."""
        from mmrl.dist import barrier, rank

        if rank() == 0:
            if self.transfer == "http":
                self.send_http(weights)
            else:
                self.send_collective(weights)
        elif weights.gathers:
            weights.walk()
        barrier()

    def send_http(self, weights: SyncWeights) -> None:
        from safetensors.torch import save

        blob = save({n: t.detach().cpu().contiguous() for n, t in weights})
        self._all(lambda url: self._call(url, "/weights/load", blob, "application/octet-stream"))

    def transfer_address(self) -> Tuple[str, int]:
        given = os.environ.get("MMRL_TRANSFER_ADDR")
        if given:
            host, port = given.rsplit(":", 1)
            return host, int(port)
        first = urllib.parse.urlsplit(self.urls[0])
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # the interface that routes to the servers
            s.connect((first.hostname, first.port or 80))
            host = s.getsockname()[0]
        with socket.socket() as s:
            s.bind((host, 0))
            return host, s.getsockname()[1]

    def join(self) -> None:
        """Create the transfer group: this process is rank 0, server ``k`` rank ``k + 1``."""
        from mmrl.rollout.transfer_group import join_group

        host, port = self.transfer_address()
        world = len(self.urls) + 1
        ranks = list(range(1, world))
        joined = [self.pool.submit(self._call, url, "/weights/init", json.dumps(
            {"host": host, "port": port, "rank": r, "world_size": world, "timeout_s": self.timeout,
             "backend": self.transfer_backend}).encode()) for url, r in zip(self.urls, ranks)]
        try:
            self.group = join_group(host, port, 0, world, self.timeout, self.transfer_backend)
        except Exception as e:  # noqa: BLE001
            raise RolloutServerError(f"the weight-transfer group at {host}:{port} did not form within "
                                     f"{self.timeout:.0f} s: {e}") from e
        for f in joined:
            f.result()

    def send_collective(self, weights: SyncWeights) -> None:
        from mmrl.rollout.transfer_group import send_buckets

        if self.group is None:
            self.join()
        device = torch.device("cuda", torch.cuda.current_device()) if self.transfer_backend == "nccl" else "cpu"
        body = json.dumps({"manifests": weights.manifests}).encode()
        receiving = [self.pool.submit(self._call, url, "/weights/update", body) for url in self.urls]
        try:
            send_buckets(self.group, weights, device)
        except Exception as e:  # noqa: BLE001
            raise RolloutServerError(f"weight broadcast to the rollout servers failed: {e}") from e
        for f in receiving:
            f.result()

    def reset_caches(self) -> None:
        from mmrl.dist import rank

        if rank() == 0:
            self._all(lambda url: self._call(url, "/reset_caches", b"{}"))

    def sleep(self, level: int) -> None:  # a server keeps its GPUs: nothing to free for the trainer
        return None

    def wake(self, tags: Optional[List[str]]) -> None:
        return None
