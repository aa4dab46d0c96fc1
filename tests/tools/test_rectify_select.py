"""Choosing the rectify-SFT setting on a validation split (mmrl.tools.rectify_select, the ``rectify.*`` config):
the seek world's val clips continue the train stream without changing train or test, the candidate grid and its
order, teacher scripts mixed into the rectified set, and the config and data errors (a grid without a validation
split, the test split or a training clip as validation). The selection end to end: tests/bench/test_tools_bench_smoke.py."""
import json

import pytest

from mmrl.config import load_config
from mmrl.data.synth_seek import make_seek_world
from mmrl.errors import ConfigError
from mmrl.errors import DataError
from mmrl.tools.rectify_pipeline import teacher_scripts_of
from mmrl.tools.rectify_select import candidates, load_val, mix_scripts

from support import REPO

SUITE = str(REPO / "tools" / "video_seek.yaml")


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    root = tmp_path_factory.mktemp("rectify_select")
    kw = dict(seed=3, duration=8.0, fps=4.0, flash_frames=2, overview=4)
    make_seek_world(str(root / "plain"), 4, 2, **kw)
    make_seek_world(str(root / "val"), 4, 2, n_val=3, **kw)
    return root


def _cfg(world, *extra):
    return load_config([], [f"data.train={world / 'train.json'}", f"data.test={world / 'test.json'}",
                            "rollout.agent_loop=multi_turn", f"rollout.tools={SUITE}", "sft.lr=0.001", "sft.steps=10",
                            *extra])


def test_val_clips_continue_the_train_stream_without_changing_train_or_test(worlds):
    for name in ("train.json", "test.json", "teacher.jsonl"):
        assert (worlds / "plain" / name).read_text() == (worlds / "val" / name).read_text(), name
    assert not (worlds / "plain" / "val.json").exists()
    val = json.loads((worlds / "val" / "val.json").read_text())
    assert [v["id"] for v in val] == ["val-00000", "val-00001", "val-00002"]
    assert all((worlds / "val" / v["video"]).exists() and v["evidence"]["segments"] for v in val)
    with pytest.raises(ValueError, match="n_val"):
        make_seek_world(str(worlds / "bad"), 1, 1, n_val=-1)


def test_candidates_grid_in_order_and_defaults(worlds):
    w = worlds / "val"
    assert candidates(_cfg(w)) == [{"tag": "lr0.001_steps10_mix0", "lr": 0.001, "steps": 10, "teacher_mix": 0.0}]
    cfg = _cfg(w, f"rectify.val={w / 'val.json'}", "rectify.lr=[1e-4,1e-3]", "rectify.teacher_mix=[0,0.5]",
               f"rectify.teacher={w / 'teacher.jsonl'}")
    assert [c["tag"] for c in candidates(cfg)] == ["lr0.0001_steps10_mix0", "lr0.0001_steps10_mix0.5",
                                                   "lr0.001_steps10_mix0", "lr0.001_steps10_mix0.5"]


def test_mix_adds_teacher_scripts_of_other_training_samples(worlds, tmp_path):
    w = worlds / "val"
    teacher = [json.loads(x) for x in (w / "teacher.jsonl").read_text().splitlines()]
    rect = tmp_path / "rectified.jsonl"
    rect.write_text(json.dumps({"id": "train-00001", "turns": ["A"]}) + "\n")
    ids = {t["id"] for t in teacher}
    out = tmp_path / "mix.jsonl"
    assert mix_scripts(str(rect), str(w / "teacher.jsonl"), 2.0, ids, 0, out) == 2
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0] == {"id": "train-00001", "turns": ["A"]}
    assert len({x["id"] for x in lines}) == 3 and "train-00001" not in {x["id"] for x in lines[1:]}
    assert all(x["turns"] == next(t["turns"] for t in teacher if t["id"] == x["id"]) for x in lines[1:])
    # the same seed draws the same scripts; a mix beyond the pool takes all of it
    again = tmp_path / "again.jsonl"
    mix_scripts(str(rect), str(w / "teacher.jsonl"), 2.0, ids, 0, again)
    assert again.read_text() == out.read_text()
    assert mix_scripts(str(rect), str(w / "teacher.jsonl"), 10.0, ids, 0, out) == 3


@pytest.mark.parametrize("extra, key", [
    (["rectify.lr=[1e-4]"], "rectify.lr"),
    (["rectify.steps=[5]"], "rectify.steps"),
    (["VAL", "rectify.steps=[0]"], "rectify.steps"),
    (["VAL", "rectify.teacher_mix=[-1]"], "rectify.teacher_mix"),
    (["VAL", "rectify.teacher_mix=[0,1]"], "rectify.teacher"),
    (["VAL", "TEACHER", "rectify.teacher_mix=[0]"], "rectify.teacher"),
    (["rectify.val=TEST"], "rectify.val"),
    (["rectify.control=true"], "rectify.control"),
    (["VAL", "rectify.control=true", "rectify.teacher_mix=[0,1]"], "rectify.control"),
])
def test_config_errors_name_the_key(worlds, extra, key):
    w = worlds / "val"
    subst = {"VAL": f"rectify.val={w / 'val.json'}", "TEACHER": f"rectify.teacher={w / 'teacher.jsonl'}",
             "rectify.val=TEST": f"rectify.val={w / 'test.json'}"}
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        _cfg(w, *[subst.get(e, e) for e in extra])


def test_validation_sharing_a_clip_with_train_or_test_is_refused(worlds, tmp_path):
    w = worlds / "val"
    val, _ = load_val(_cfg(w, f"rectify.val={w / 'val.json'}"))
    assert [s.id for s in val] == ["val-00000", "val-00001", "val-00002"]
    for split in ("train", "test"):
        items = json.loads((w / "val.json").read_text()) + json.loads((w / f"{split}.json").read_text())[:1]
        for it in items:
            it["video"] = str(w / it["video"])
        bad = tmp_path / f"val_{split}.json"
        bad.write_text(json.dumps(items))
        with pytest.raises(ConfigError, match=f"rectify.val.*also in data.{split}"):
            load_val(_cfg(w, f"rectify.val={bad}"))


def test_control_takes_the_teacher_without_a_mix(worlds):
    """rectify.control uses rectify.teacher, so the teacher alone (mix 0) is no longer an unused key."""
    w = worlds / "val"
    cfg = _cfg(w, f"rectify.val={w / 'val.json'}", f"rectify.teacher={w / 'teacher.jsonl'}", "rectify.control=true")
    assert cfg.rectify.control and cfg.rectify.teacher_mix == []
    assert not _cfg(w).rectify.control  # off by default


def test_control_scripts_are_the_teachers_of_the_rewritten_samples(worlds, tmp_path):
    """(b'): the teacher script of every rewritten sample, in the rectified file's order, each id once."""
    w = worlds / "val"
    teacher = {t["id"]: t["turns"] for t in map(json.loads, (w / "teacher.jsonl").read_text().splitlines())}
    rect = tmp_path / "rectified.jsonl"
    rect.write_text("".join(json.dumps({"id": i, "turns": ["rewritten"]}) + "\n"
                            for i in ("train-00002", "train-00000", "train-00002")))
    out = tmp_path / "control" / "teacher_of_rectified.jsonl"
    assert teacher_scripts_of(str(rect), str(w / "teacher.jsonl"), out) == 2
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines == [{"id": "train-00002", "turns": teacher["train-00002"]},
                     {"id": "train-00000", "turns": teacher["train-00000"]}]
    rect.write_text(json.dumps({"id": "train-99999", "turns": ["x"]}) + "\n")
    with pytest.raises(DataError, match=r"no teacher script for 1 rewritten samples \(e\.g\. 'train-99999'\)"):
        teacher_scripts_of(str(rect), str(w / "teacher.jsonl"), out)
