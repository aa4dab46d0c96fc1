"""Ranks on their GPUs (issue 26 item 3), simulated on CPU: ``torch.cuda`` is monkeypatched to report N devices and
record ``set_device``; ``LOCAL_RANK`` is set as torchrun / deepspeed set it."""
from __future__ import annotations

import sys
import types

import pytest
import torch

from mmrl import dist
from mmrl.errors import ConfigError
from mmrl.models.loading import resolve_device


@pytest.fixture
def gpus(monkeypatch):
    """A node with 4 fake GPUs; ``events`` records CUDA calls in order."""
    events = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: events.append(("set_device", int(d))))
    return events


@pytest.mark.parametrize("local_rank", [0, 1, 3])
@pytest.mark.parametrize("name", ["auto", "cuda"])
def test_auto_and_cuda_resolve_to_this_ranks_gpu_after_set_device(gpus, monkeypatch, local_rank, name):
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    assert resolve_device(name) == f"cuda:{local_rank}"
    assert gpus == [("set_device", local_rank)]


def test_explicit_cuda_index_is_kept_and_checked(gpus, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert resolve_device("cuda:1") == "cuda:1" and gpus == [("set_device", 1)]
    with pytest.raises(ConfigError, match="'model.device' = 'cuda:7'"):
        resolve_device("cuda:7")


def test_local_rank_beyond_the_devices_is_a_one_line_error(gpus, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "4")
    with pytest.raises(ConfigError, match="LOCAL_RANK=4 but this node sees 4 CUDA device") as e:
        resolve_device("auto")
    assert "\n" not in str(e.value) and gpus == []


def test_cpu_without_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve_device("auto") == "cpu"
    with pytest.raises(ConfigError, match="'model.device'"):
        resolve_device("cuda")


def test_process_group_starts_after_the_rank_selected_its_gpu(gpus, monkeypatch):
    """``init_distributed('cuda')``: ``set_device(LOCAL_RANK)`` before ``deepspeed.init_distributed`` (NCCL binds the
    current device when the group starts)."""
    fake = types.ModuleType("deepspeed")
    fake.init_distributed = lambda dist_backend: gpus.append(("init_distributed", dist_backend))
    monkeypatch.setitem(sys.modules, "deepspeed", fake)
    monkeypatch.setattr(dist, "is_dist", lambda: False)
    for k, v in {"RANK": "6", "LOCAL_RANK": "2", "WORLD_SIZE": "8"}.items():
        monkeypatch.setenv(k, v)
    dist.init_distributed("cuda")
    assert gpus == [("set_device", 2), ("init_distributed", "nccl")]


def test_the_model_moves_to_this_ranks_gpu_after_set_device(gpus, monkeypatch):
    """``load_model_and_processor``: the weights go to ``cuda:LOCAL_RANK``, after the rank selected it."""
    from mmrl.config import ModelConfig
    from mmrl.models import loading

    monkeypatch.setenv("LOCAL_RANK", "3")
    seen = {}

    def fake_load(path, dtype, freeze, lora, ckpt, device=None, **kw):
        seen["device"], seen["events"] = device, list(gpus)
        return torch.nn.Linear(1, 1)

    monkeypatch.setattr(loading, "load_model", fake_load)
    monkeypatch.setattr(loading, "load_processor", lambda path: None)
    loading.load_model_and_processor(ModelConfig(path="tiny"))
    assert seen == {"device": "cuda:3", "events": [("set_device", 3)]}


def test_the_colocated_vllm_engine_starts_on_this_ranks_gpu(gpus, monkeypatch):
    """``LocalBackend``: ``set_device(LOCAL_RANK)`` before ``vllm.LLM`` allocates anything."""
    from mmrl.rollout.vllm_engine import LocalBackend

    fake = types.ModuleType("vllm")
    fake.LLM = lambda **kw: gpus.append(("LLM", kw["seed"]))
    platforms = types.ModuleType("vllm.platforms")  # vLLM's CUDA platform: a GPU to bind, sleep mode available
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: False, is_sleep_mode_available=lambda: True)
    fake.platforms = platforms
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "5")
    LocalBackend("m", gpu_memory_utilization=0.3, dtype="bfloat16", seed=10, max_model_len=64)
    assert gpus == [("set_device", 1), ("LLM", 15)]
