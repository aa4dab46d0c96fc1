"""Bad input: clear errors naming the sample / file / key, or skipped and counted with data.on_error=skip."""
import json
import shutil

import pytest
import torch

from support import small_overrides
from mmrl.config import load_config
from mmrl.data.schema import Sample, VideoRef
from mmrl.errors import ConfigError, DataError, RewardError
from mmrl.media.decode import MediaBudget, decode_video


def _sample(path, **kw):
    return Sample(id="s1", question="q", candidates=["a", "b"], answer="a", video=VideoRef(path=str(path), **kw))


def test_missing_video(tmp_path):
    with pytest.raises(DataError, match=r"sample 's1', file '.*nope.mp4': video file not found"):
        decode_video(VideoRef(str(tmp_path / "nope.mp4")), "s1")


def test_unreadable_video(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video at all" * 10)
    with pytest.raises(DataError, match=r"sample 's1', file '.*bad.mp4': unreadable video"):
        decode_video(VideoRef(str(bad)), "s1")


def test_zero_frame_video(tmp_path):
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match=r"sample 's1'.*(zero frames|unreadable)"):
        decode_video(VideoRef(str(empty)), "s1")
    (tmp_path / "frames").mkdir()
    with pytest.raises(DataError, match=r"sample 's1'.*frame folder holds no frames"):
        decode_video(VideoRef(str(tmp_path / "frames")), "s1")


def test_clip_shorter_than_requested(video_world):
    path = next((video_world / "videos").glob("*.mp4"))
    with pytest.raises(DataError, match=r"sample 's1'.*8 frames in range but 16 were requested"):
        decode_video(VideoRef(str(path), nframes=16), "s1", MediaBudget())


def test_time_range_outside_clip(video_world):
    path = next((video_world / "videos").glob("*.mp4"))
    with pytest.raises(DataError, match=r"sample 's1'.*selects no frame"):
        decode_video(VideoRef(str(path), start=50.0, end=60.0), "s1")


def test_annotation_missing_field(tmp_path, video_world):
    items = json.loads((video_world / "train.json").read_text())[:3]
    del items[1]["candidates"]
    (tmp_path / "a.json").write_text(json.dumps(items))
    shutil.copytree(video_world / "videos", tmp_path / "videos")
    from mmrl.data.annotations import load_samples

    with pytest.raises(DataError, match=r"item 1.*candidates"):
        load_samples(str(tmp_path / "a.json"))


@pytest.mark.parametrize("override,pattern", [
    ("rollout.nn=3", r"config key 'rollout.nn'.*not in"),
    ("rollout.n=abc", r"config key 'rollout.n'"),
    ("train.lr=fast", r"config key 'train.lr'"),
    ("data.on_error=ignore", r"config key 'data.on_error'"),
    ("rollout.n=0", r"config key 'rollout.n' must be >= 1"),
    ("rewards.0.weight=heavy", r"override 'rewards.0.weight=heavy'.*config key 'rewards\[0\].weight'"),
    ("rewards.params=1", r"override 'rewards.params=1'.*config key 'rewards"),
])
def test_config_errors_name_the_key(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config(None, [override])


def test_overrides_index_lists():
    """``rewards.0.params.fmt_weight=0`` edits one entry of the rewards list in place (the rest is kept)."""
    cfg = load_config(None, ["rewards=[{name: bpo_contract, params: {abstain_text: none of these}}, {name: format}]",
                             "rewards.0.params.fmt_weight=0.0", "rewards.1.weight=0.5"])
    assert cfg.rewards[0].params == {"abstain_text": "none of these", "fmt_weight": 0.0}
    assert (cfg.rewards[1].name, cfg.rewards[1].weight) == ("format", 0.5)


def test_config_file_unknown_key(tmp_path):
    (tmp_path / "c.yaml").write_text("train:\n  stepz: 3\n")
    with pytest.raises(ConfigError, match=r"c.yaml.*train.stepz"):
        load_config([str(tmp_path / "c.yaml")])


def test_cli_prints_error_without_traceback(capsys):
    from mmrl.cli import main

    assert main(["train", "--dry-run", "rollout.nn=3"]) == 2
    err = capsys.readouterr().err
    assert "config key 'rollout.nn'" in err and "Traceback" not in err


def _world_with_broken_video(src, dst):
    shutil.copytree(src, dst)
    items = json.loads((dst / "train.json").read_text())
    (dst / items[0]["video"]).write_bytes(b"garbage")
    return items[0]["id"]


def test_skip_mode_counts_bad_samples(video_world, tiny_model_path, tmp_path):
    from mmrl.train.rl_trainer import RLTrainer

    world = tmp_path / "w"
    bad_id = _world_with_broken_video(video_world, world)
    over = small_overrides(world, tmp_path / "run", tiny_model_path) + ["data.shuffle=false", "train.steps=1"]
    with pytest.raises(DataError, match=f"sample '{bad_id}'"):
        RLTrainer(load_config(None, over), quiet=True).run()
    # the media probe off: the broken video is met in the first step's rollout
    hist = RLTrainer(load_config(None, over + ["data.on_error=skip", f"train.out_dir={tmp_path / 'run2'}",
                                               "data.preflight=none"]), quiet=True).run()
    assert hist[0]["skipped_samples"] == 1.0


def test_all_equal_group_gives_zero_advantages():
    import mmrl.algos  # noqa: F401
    from mmrl.algos.base import AdvantageInputs
    from mmrl.algos.spec import estimate

    inp = AdvantageInputs(rewards=torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0]), group_ids=torch.tensor([0, 0, 0, 1, 1]))
    for name, params in (("grpo", {"eps": 0.0}), ("drgrpo", {}), ("dapo", {"eps": 0.0})):
        adv = estimate(name, inp, **params).advantages
        assert torch.isfinite(adv).all() and torch.equal(adv[:3], torch.zeros(3))


def test_reward_that_raises_or_returns_nan_names_function_and_sample(video_world):
    from mmrl.data.schema import Trajectory
    from mmrl.rewards import REWARDS, RewardContext, compute_rewards
    from mmrl.rewards.base import RewardSpec

    REWARDS.register("test_boom")(lambda ctx: 1 / 0)
    REWARDS.register("test_nan")(lambda ctx: [float("nan")] * len(ctx))
    t = Trajectory("clip-9", 0, "original", "anchor", torch.tensor([1]), torch.tensor([2]), torch.zeros(1),
                   torch.ones(1, dtype=torch.bool), "A")
    ctx = [RewardContext(sample=_sample("x"), trajectory=t, candidates=["a", "b"], expected="A")]
    ctx[0].sample.id = "clip-9"
    with pytest.raises(RewardError, match=r"'test_boom' raised ZeroDivisionError.*clip-9"):
        compute_rewards([RewardSpec("test_boom")], ctx)
    with pytest.raises(RewardError, match=r"'test_nan' returned nan for sample 'clip-9'"):
        compute_rewards([RewardSpec("test_nan")], ctx)
