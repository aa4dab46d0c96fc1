"""The transformers-compat point (mmrl/models/compat.py) names the KV cache as the installed release does."""
import inspect

import torch
import transformers
from packaging.version import Version
from transformers import Qwen2_5_VLModel, Qwen2VLModel, Qwen3VLModel
from transformers.cache_utils import Cache

from mmrl.models.compat import CACHE_NAME, cache_kwargs, output_cache
from mmrl.models.loading import load_model
from mmrl.models.scoring import backbone


def test_the_name_is_the_one_the_installed_cores_take():
    for core in (Qwen2VLModel, Qwen2_5_VLModel, Qwen3VLModel):
        assert CACHE_NAME in inspect.signature(core.forward).parameters, core.__name__


def test_the_name_follows_the_documented_table():
    """docs/install_gpu.md: ``past_key_values`` up to 5.23, ``cache`` from 5.24."""
    expected = "cache" if Version(transformers.__version__).release >= (5, 24) else "past_key_values"
    assert CACHE_NAME == expected, transformers.__version__


def test_a_core_returns_the_cache_and_continues_from_it(tiny_model_path):
    """Prefill 5 tokens, then feed 2 more through ``cache_kwargs``: the cache grows to 7 columns and the last hidden
    state equals one forward over all 7 tokens."""
    core, _ = backbone(load_model(tiny_model_path))
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    with torch.no_grad():
        first = core(input_ids=ids[:, :5], use_cache=True)
        assert CACHE_NAME in first.keys()
        cache = output_cache(first)
        assert isinstance(cache, Cache) and cache.get_seq_length() == 5
        nxt = core(input_ids=ids[:, 5:], use_cache=True, **cache_kwargs(cache))
        assert output_cache(nxt) is cache and cache.get_seq_length() == 7
        whole = core(input_ids=ids, use_cache=False)
    assert torch.allclose(nxt.last_hidden_state[0, -1], whole.last_hidden_state[0, -1], atol=1e-5)
