"""Session fixtures shared by every test folder: the embedded tiny model and small synthetic worlds."""
from __future__ import annotations

import os
from pathlib import Path

import pytest



MODEL_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")  # every model-facing test runs over these (family_model_path)


@pytest.fixture(scope="session")
def mmrl_cache(tmp_path_factory):
    """One ``MMRL_CACHE`` folder for the session: tiny models are built there once (the cache logic users get)."""
    cache = tmp_path_factory.mktemp("mmrl_cache")
    old = os.environ.get("MMRL_CACHE")
    os.environ["MMRL_CACHE"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("MMRL_CACHE", None)
    else:
        os.environ["MMRL_CACHE"] = old


@pytest.fixture(scope="session")
def tiny_model_path(mmrl_cache) -> str:
    """The tiny Qwen2.5-VL (``model.path: tiny``), built once per session."""
    from mmrl.models.tiny import ensure_tiny_model

    return str(ensure_tiny_model())


@pytest.fixture(scope="session", params=MODEL_FAMILIES)
def family_model_path(request, mmrl_cache) -> str:
    """The tiny model of each family in turn (Qwen2-VL, Qwen2.5-VL, Qwen3-VL), built once per session each."""
    from mmrl.models.tiny import ensure_tiny_model

    return str(ensure_tiny_model(request.param))


@pytest.fixture(scope="session")
def video_world(tmp_path_factory) -> Path:
    from mmrl.data.synth_video import make_video_world

    out = tmp_path_factory.mktemp("video_world")
    make_video_world(str(out), 24, 8, seed=0)
    return out


@pytest.fixture(scope="session")
def image_world(tmp_path_factory) -> Path:
    from mmrl.data.synth_image import make_image_world

    out = tmp_path_factory.mktemp("image_world")
    make_image_world(str(out), 16, 8, seed=0)
    return out
