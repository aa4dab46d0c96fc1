"""tools/streaming.yaml and rollout.agent_loop=stream in a run config: every key checked, the plan line."""
import pytest

from mmrl.config import load_config
from mmrl.errors import ConfigError
from mmrl.stream.config import load_stream_config


def test_stream_config_keys(tmp_path):
    cfg = load_stream_config()
    assert (cfg.frames_per_chunk, cfg.window_chunks, cfg.carry_chunks, cfg.max_turns) == (2, 8, 4, 13)
    bad = tmp_path / "bad.yaml"
    for text, key in (("window_chunk: 8\n", "window_chunk"), ("fps: 3\n", "fps"), ("block_chunks: 9\n", "block_chunks"),
                      ("memory_budget: 0\n", "memory_budget"), ("fps: x\n", "fps")):
        bad.write_text(text)
        with pytest.raises(ConfigError, match=key):
            load_stream_config(str(bad))
    with pytest.raises(ConfigError, match="not found"):
        load_stream_config(str(tmp_path / "none.yaml"))


def test_run_config_with_the_stream_loop():
    from mmrl.rollout.agent_loop_tools import check_rollout_config
    from mmrl.train.plan import describe_plan

    cfg = load_config([], ["rollout.agent_loop=stream"])
    assert check_rollout_config(cfg.rollout).startswith("rollout loop: stream with tools/streaming.yaml: blocks of 4")
    assert any("window 8 chunks, memory <= 64 tokens, <= 13 turns" in x for x in describe_plan(cfg))
    load_config([], ["rollout.agent_loop=stream", "rollout.tools=tools/streaming.yaml"])
    for bad in ("train.backend=deepspeed", "rollout.engine=vllm"):
        with pytest.raises(ConfigError, match="'stream' runs with rollout.engine=hf"):
            load_config([], ["rollout.agent_loop=stream", bad])
    with pytest.raises(ConfigError, match="video_seek.yaml: key 'description'"):  # a tool suite is no stream config
        check_rollout_config(load_config([], ["rollout.agent_loop=stream", "rollout.tools=tools/video_seek.yaml"]).rollout)
