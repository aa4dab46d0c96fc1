"""``model.attn_implementation`` is validated before weights load and reaches ``from_pretrained``; top-p sampling,
whose distribution the scorer does not reproduce, is refused naming the keys (issue 26 item 7)."""
import importlib.util

import pytest

from mmrl.config import load_config
from mmrl.errors import ConfigError
from mmrl.models.loading import load_model


def test_unknown_kernel_and_missing_flash_attn_are_config_errors():
    with pytest.raises(ConfigError, match="'model.attn_implementation' = 'flash'"):
        load_config(None, ["model.attn_implementation=flash"])
    if importlib.util.find_spec("flash_attn") is None:
        with pytest.raises(ConfigError, match="'model.attn_implementation' = 'flash_attention_2' needs the flash_attn"):
            load_config(None, ["model.attn_implementation=flash_attention_2", "rollout.engine=vllm"])
    else:
        with pytest.raises(ConfigError, match="rollout.engine=vllm"):
            load_config(None, ["model.attn_implementation=flash_attention_2"])


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_the_kernel_reaches_the_model(tiny_model_path, impl):
    assert load_model(tiny_model_path, attn_implementation=impl).config._attn_implementation == impl


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_top_p_below_one_is_refused_naming_both_keys(engine):
    with pytest.raises(ConfigError, match=r"'rollout.top_p' = 0.9.*rollout.engine = '" + engine):
        load_config(None, ["rollout.top_p=0.9", f"rollout.engine={engine}"])
    assert load_config(None, ["rollout.top_p=1.0"]).rollout.top_p == 1.0
