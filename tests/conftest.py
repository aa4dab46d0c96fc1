"""Session fixtures shared by every test folder: the embedded tiny model and small synthetic worlds."""
from __future__ import annotations

import os
from pathlib import Path

import pytest



@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """The tiny Qwen2.5-VL, built once per session (through the same cache logic users get)."""
    cache = tmp_path_factory.mktemp("mmrl_cache")
    old = os.environ.get("MMRL_CACHE")
    os.environ["MMRL_CACHE"] = str(cache)
    from mmrl.models.tiny import ensure_tiny_model

    path = str(ensure_tiny_model())
    yield path
    if old is None:
        os.environ.pop("MMRL_CACHE", None)
    else:
        os.environ["MMRL_CACHE"] = old


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
