"""Server mode without a server: the ``rollout.servers`` keys, how requests are spread over servers, and the
weight buckets both sides of the transfer group agree on (the real servers: tests/real_vllm/test_server_*.py)."""
from __future__ import annotations

import pytest
import torch

from mmrl.errors import ConfigError


@pytest.mark.parametrize("overrides, key", [
    (["rollout.vllm_mode=server", "rollout.servers=[127.0.0.1:8000]"], r"rollout.servers\[0\]"),
    (["rollout.servers=[http://a:8000,http://b]"], r"rollout.servers\[1\]"),
    (["rollout.servers=[http://a:8000/v1]"], r"rollout.servers\[0\]"),
    (["rollout.servers=[http://a:8000,http://a:8000/]"], "lists a server twice"),
    (["rollout.weight_transfer=nccl"], "rollout.weight_transfer"),
    (["rollout.vllm_mode=remote"], "rollout.vllm_mode"),
    (["rollout.server_timeout_s=0"], "rollout.server_timeout_s"),
])
def test_server_keys_are_validated(overrides, key):
    from mmrl.config import load_config
    from mmrl.validate import validate

    cfg = load_config([], ["rollout.engine=vllm", *overrides])
    with pytest.raises(ConfigError, match=key):
        validate(cfg, data_paths=False, registries=False)


def test_valid_servers_pass():
    from mmrl.config import load_config
    from mmrl.validate import validate

    validate(load_config([], ["rollout.engine=vllm", "rollout.vllm_mode=server",
                              "rollout.servers=[http://10.0.0.2:8000,https://node-3:8001]"]),
             data_paths=False, registries=False)


def test_groups_go_whole_to_one_server():
    from mmrl.rollout.vllm_client import ServerClient

    client = ServerClient.__new__(ServerClient)  # no servers to reach: only the spreading rule
    client.urls = ["http://a:1", "http://b:2", "http://c:3"]
    assert client.server_of([4, 4, 5, 7, 7, 9], 6) == [1, 1, 2, 1, 1, 0]
    assert client.server_of(["x", "y", "x", "z"], 4) == [0, 1, 0, 2]


def test_buckets_pack_and_unpack():
    from mmrl.rollout.transfer_group import nbytes, pack, unpack
    from mmrl.rollout.weight_channel import buckets

    w = [("a", torch.arange(6, dtype=torch.float32).reshape(2, 3)), ("b", torch.ones(3, dtype=torch.bfloat16)),
         ("c", torch.arange(10, dtype=torch.float32)), ("d", torch.tensor([7], dtype=torch.int64))]
    # 24 + 6 bytes fit in 32; the 40-byte tensor gets a bucket of its own; then 8 bytes
    ranges = buckets([t.numel() * t.element_size() for _, t in w], 32)
    assert [[n for n, _ in w[lo:hi]] for lo, hi in ranges] == [["a", "b"], ["c"], ["d"]]
    for b in (w[lo:hi] for lo, hi in ranges):
        manifest, buf = pack(b, "cpu")
        assert buf.dtype == torch.uint8 and buf.numel() == nbytes(manifest)
        got = unpack(manifest, buf.clone())
        assert all(n == m and t.dtype == u.dtype and torch.equal(t, u) for (n, t), (m, u) in zip(b, got))
    with pytest.raises(ValueError, match="holds 31 bytes, its manifest 30"):
        unpack(pack(w[:2], "cpu")[0], torch.zeros(31, dtype=torch.uint8))
