"""Real rollout servers (vLLM's CPU build) for the tests/real_vllm/test_server_*.py files: loopback, a free port, fp32,
eager, one OpenMP thread, two media per prompt (``mmrl.rollout.server_process``)."""
from __future__ import annotations

from mmrl.rollout.server_process import REPO, free_port  # noqa: F401  (re-exported for the tests)
from mmrl.rollout.server_process import start_servers as _start

SECRET = "test-secret-i46"


def start_servers(model: str, log_dir, count: int, secret: str | None = SECRET):
    return _start(model, log_dir, count, secret, extra=["--max-media-per-prompt", "2"])
