"""The one place where mmrl adapts to the transformers release installed (pyproject: ``transformers>=5.16.1,<5.25``).

The KV cache's name is the only difference mmrl meets across that range (``docs/install_gpu.md`` has the table):

| transformers | forward argument | output field |
|---|---|---|
| 5.16.1 – 5.23.x | ``past_key_values=`` | ``out.past_key_values`` |
| 5.24.x | ``cache=`` (``past_key_values=`` a deprecated alias, removal announced for 5.40) | ``out.cache`` |

Call sites pass ``**cache_kwargs(cache)`` to a model core and read ``output_cache(out)``. The name is read once,
from the fields of ``transformers.modeling_outputs.BaseModelOutputWithPast`` (5.24 renamed the field in every output
class of ``modeling_outputs`` in the release that renamed the forward argument): a feature check, no version compare.
``tests/models/test_compat.py`` checks it against the Qwen-VL cores' signatures and a real forward.
"""
from __future__ import annotations

from dataclasses import fields

from transformers.modeling_outputs import BaseModelOutputWithPast

CACHE_NAME = "cache" if "cache" in {f.name for f in fields(BaseModelOutputWithPast)} else "past_key_values"


def cache_kwargs(cache) -> dict:
    """``{name: cache}`` for a model core's forward, under the installed release's name for the KV cache."""
    return {CACHE_NAME: cache}


def output_cache(out):
    """The KV cache a model core returned (``use_cache=True``), under the installed release's field name."""
    return getattr(out, CACHE_NAME)
