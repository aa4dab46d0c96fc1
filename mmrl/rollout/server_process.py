"""Start a rollout server (``python -m mmrl.rollout.vllm_server``) as a child process on loopback and wait until it
answers ``/health``: for the real-engine tests (tests/real_vllm/server_support.py) and bench/weight_transfer.py. The
launch scripts start servers on GPUs (scripts/rollout_server.sh)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from mmrl.rollout.vllm_client import SECRET_ENV

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    url: str
    log: Path

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def stop(self) -> None:
        """End the server and every process it started (vLLM's EngineCore and workers are its children, in its own
        session): SIGTERM to the group, SIGKILL after 30 s; also when the server itself was killed or stopped."""
        import signal

        def group(sig) -> None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

        group(signal.SIGCONT)  # a server a test stopped (SIGSTOP) must run to take SIGTERM
        group(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.5)
        group(signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(10)


def start_server(model: str, log_dir, secret: Optional[str], dtype: str = "float32", max_model_len: int = 2048,
                 extra: List[str] = ()) -> ServerProcess:
    """One CPU-friendly server (eager, one OpenMP thread, a quarter GiB of KV cache) on a free loopback port."""
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.pop(SECRET_ENV, None)
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # --kv-cache-gib sizes it
    if secret:
        env[SECRET_ENV] = secret
    log = Path(log_dir) / f"server_{port}.log"
    cmd = [sys.executable, "-m", "mmrl.rollout.vllm_server", "--model", model, "--port", str(port), "--dtype", dtype,
           "--enforce-eager", "--max-model-len", str(max_model_len), "--kv-cache-gib", "0.25", *extra]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)  # its own process group: stop() ends vLLM's children too
    return ServerProcess(proc, f"http://127.0.0.1:{port}", log)


def wait_healthy(server: ServerProcess, timeout: float = 300.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if server.proc.poll() is not None:
            raise RuntimeError(f"rollout server exited with {server.proc.returncode}:\n{server.tail()}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=5) as r:
                if json.loads(r.read()).get("ok"):
                    return
        except OSError:
            time.sleep(1.0)
    server.stop()
    raise RuntimeError(f"rollout server not healthy after {timeout:.0f} s:\n{server.tail()}")


def start_servers(model: str, log_dir, count: int, secret: Optional[str], **kw) -> List[ServerProcess]:
    servers = [start_server(model, log_dir, secret, **kw) for _ in range(count)]
    try:
        for s in servers:
            wait_healthy(s)
    except Exception:
        for s in servers:
            s.stop()
        raise
    return servers
