"""A small streaming world shared by the stream tests (2 train + 2 test streams of 16 s, 56x56 at 2 fps)."""
import json
import os

import pytest


@pytest.fixture(scope="session")
def stream_world(tmp_path_factory):
    from mmrl.data.synth_stream import make_stream_world

    out = tmp_path_factory.mktemp("stream_world")
    info = make_stream_world(str(out), 2, 2, seed=0)
    info["items_test"] = json.loads(open(info["ovo_test"]).read())
    info["oracle"] = json.loads(open(info["oracle_test"]).read())
    return info


@pytest.fixture()
def blocks(stream_world):
    """The blocks of the first test stream (with the oracle)."""
    from mmrl.stream.config import load_stream_config
    from mmrl.stream.ovo import group_by_video, stream_blocks

    cfg = load_stream_config()
    video, items = next(iter(group_by_video(stream_world["items_test"]).items()))
    path = os.path.join(stream_world["video_root"], video)
    return cfg, stream_blocks(path, items, cfg, 16.0, stream_world["oracle"][video])
