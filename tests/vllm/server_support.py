"""Real rollout servers (``python -m mmrl.rollout.vllm_server`` on vLLM's CPU build) for the tests/vllm/test_server_*
files: started as subprocesses on loopback with a free port, fp32, eager, one OpenMP thread."""
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

REPO = Path(__file__).resolve().parents[2]
SECRET = "test-secret-i46"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_server(model: str, log_dir: Path, secret: str | None = SECRET, max_model_len: int = 2048) -> Server:
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_CPU_KVCACHE_SPACE="1", PYTHONPATH=str(REPO))
    env.pop("MMRL_ROLLOUT_SECRET", None)
    if secret:
        env["MMRL_ROLLOUT_SECRET"] = secret
    log = Path(log_dir) / f"server_{port}.log"
    cmd = [sys.executable, "-m", "mmrl.rollout.vllm_server", "--model", model, "--port", str(port), "--dtype", "float32",
           "--enforce-eager", "--max-model-len", str(max_model_len), "--max-media-per-prompt", "2"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    return Server(proc, f"http://127.0.0.1:{port}", log)


def wait_healthy(server: Server, timeout: float = 300.0) -> None:
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
    raise RuntimeError(f"rollout server not healthy after {timeout:.0f} s:\n{server.tail()}")


def start_servers(model: str, log_dir: Path, count: int, secret: str | None = SECRET):
    servers = [start_server(model, log_dir, secret) for _ in range(count)]
    try:
        for s in servers:
            wait_healthy(s)
    except Exception:
        for s in servers:
            s.stop()
        raise
    return servers
