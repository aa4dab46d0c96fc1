"""Hostile inputs at the command line (issue 12): every case exits with status 2 and ONE stderr line that names
the culprit (config key, file, flag, sample), before any model loads; ``--debug`` shows the traceback instead.

The cases that need a model (a reward returning a string or raising mid-run, all-bad data) are at the end."""
import json
import shutil

import pytest

from mmrl.cli import main


def _one_line_error(capsys, argv, *culprits):
    rc = main(argv)
    # (the progress bars of transformers' weight loading aside)
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip() and "%|" not in x]
    assert rc == 2, (rc, err)
    assert len(err) == 1 and err[0].startswith("mmrl: error: "), err
    for c in culprits:
        assert c in err[0], (c, err[0])
    return err[0]


@pytest.fixture
def ok(video_world):
    """Overrides that validate: the session world, the tiny model (named, not built)."""
    return [f"data.train={video_world / 'train.json'}", f"data.test={video_world / 'test.json'}", "model.path=tiny"]


CONFIG_CASES = [
    (["data.train=/nope/train.json"], ["'data.train'", "/nope/train.json"]),
    (["data.train=''"], ["'data.train'", "empty"]),
    (["algorithm.name=grpoo"], ["'algorithm.name'", "did you mean 'grpo'"]),
    (["algorithm.loss=ppoo"], ["'algorithm.loss'", "did you mean 'ppo'"]),
    (["rewards=[{name: accurasy}]"], ["'rewards[0].name'", "did you mean 'accuracy'"]),
    (["rewards=[{name: 'nomodule:fn'}]"], ["'rewards[0].name'", "nomodule"]),
    (["model.path=/nope"], ["'model.path'", "/nope"]),
    (["algorithm.viewset=/nope.yaml"], ["'algorithm.viewset'", "/nope.yaml"]),
    (["algorithm.name=bpo"], ["'algorithm.viewset'", "'bpo'"]),
    (["algorithm.name=fastrl", "algorithm.params.base=bpo"], ["'algorithm.viewset'", "'fastrl'"]),  # a wrapper over BPO
    (["train.steps=-5"], ["'train.steps'", "-5"]),
    (["train.lr=-1"], ["'train.lr'"]),
    (["rollout.temperature=0"], ["'rollout.temperature'"]),
    (["rollout.top_p=1.5"], ["'rollout.top_p'"]),
    (["data.nframes=1"], ["'data.nframes'"]),
    (["data.max_skip_frac=2"], ["'data.max_skip_frac'"]),
    (["train.eval_every=5", "data.test=/nope/test.json"], ["'data.test'"]),
    (["rollout.nn=3"], ["'rollout.nn'"]),
]


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "real-run"])
@pytest.mark.parametrize("overrides,culprits", CONFIG_CASES, ids=[c[0][0] for c in CONFIG_CASES])
def test_train_config_errors_name_the_key_before_loading(capsys, ok, tmp_path, monkeypatch, overrides, culprits, dry):
    import mmrl.train.rl_trainer as rl

    monkeypatch.setattr(rl, "load_model_and_processor", lambda *a, **k: pytest.fail("model loaded"))
    argv = ["train"] + (["--dry-run"] if dry else []) + ok + [f"train.out_dir={tmp_path / 'run'}"] + overrides
    _one_line_error(capsys, argv, *culprits)
    assert not (tmp_path / "run").exists()  # nothing written either


@pytest.mark.parametrize("overrides,culprits", [
    (["sft.steps=0"], ["'sft.steps'"]), (["sft.lr=0"], ["'sft.lr'"]), (["data.train=/nope.json"], ["'data.train'"]),
    (["model.path=/nope"], ["'model.path'"]),
])
def test_sft_config_errors_name_the_key(capsys, ok, tmp_path, overrides, culprits):
    _one_line_error(capsys, ["sft"] + ok + [f"train.out_dir={tmp_path / 'sft'}"] + overrides, *culprits)


def test_model_path_that_is_not_a_checkpoint(capsys, ok, tmp_path):
    _one_line_error(capsys, ["train", "--dry-run"] + ok + [f"model.path={tmp_path}"], "'model.path'", "no config.json")


@pytest.mark.parametrize("text,where", [("train:\n  steps: [1\n", "line 3"), ("train: {steps: 3\n", "line 2"),
                                        ("- a\n- b\n", "expected a mapping")])
def test_malformed_yaml_names_file_and_line(capsys, ok, tmp_path, text, where):
    (tmp_path / "bad.yaml").write_text(text)
    _one_line_error(capsys, ["train", "--config", str(tmp_path / "bad.yaml")] + ok, "bad.yaml", where)


def test_missing_config_file(capsys, ok, tmp_path):
    _one_line_error(capsys, ["train", "--config", str(tmp_path / "nope.yaml")] + ok, "nope.yaml")


@pytest.mark.parametrize("args,culprits", [
    (["--data", "x.json"], ["--model"]),
    (["--model", "tiny"], ["--data"]),
])
def test_eval_synthetic_needs_model_and_data(capsys, args, culprits):
    _one_line_error(capsys, ["eval", "synthetic"] + args, *culprits)


def test_eval_model_that_is_not_a_checkpoint(capsys, tmp_path, video_world):
    _one_line_error(capsys, ["eval", "synthetic", "--model", str(tmp_path), "--data", str(video_world / "test.json")],
                    "--model: ", "no config.json")


@pytest.mark.parametrize("args,culprits", [
    (["--frames", "1"], ["--frames", "got 1"]), (["--size", "10"], ["--size", "got 10"]),
    (["--fps", "0"], ["--fps"]), (["--n-train", "0"], ["--n-train"]),
    (["--kind", "image", "--size", "10"], ["--size"]),
])
def test_data_synth_bad_arguments(capsys, tmp_path, args, culprits):
    _one_line_error(capsys, ["data", "synth", "--out", str(tmp_path / "w")] + args, *culprits)
    assert not (tmp_path / "w").exists()


def test_views_preview_unknown_sample(capsys, video_world, tmp_path):
    from support import REPO

    _one_line_error(capsys, ["views", "preview", "--viewset", str(REPO / "views" / "bpo_video.yaml"), "--data",
                             str(video_world / "train.json"), "--sample", "nope-1", "--out", str(tmp_path / "s.png")],
                    "sample 'nope-1'")


# ---- run directories (the CLI applies the rules before the model loads) ----------------------------------------
def _old_run(path, step=3):
    (path / "checkpoints" / f"step_{step:06d}").mkdir(parents=True)
    (path / "metrics.jsonl").write_text(json.dumps({"step": step}) + "\n")
    (path / "run.json").write_text(json.dumps({"run_id": "old", "kind": "train"}))


def test_non_empty_run_dir_is_refused(capsys, ok, tmp_path):
    _old_run(tmp_path)
    msg = _one_line_error(capsys, ["train"] + ok + [f"train.out_dir={tmp_path}"], "train.out_dir", "--resume",
                          "--overwrite", "step 3")
    assert "metrics.jsonl" in msg and (tmp_path / "metrics.jsonl").read_text().strip()  # untouched


def test_dry_run_says_what_a_real_run_would_do_with_the_run_dir(capsys, ok, tmp_path):
    _old_run(tmp_path)
    (tmp_path / "checkpoints" / "step_000003" / "owner.json").write_text(json.dumps({"run_id": "old"}))
    assert main(["train", "--dry-run"] + ok + [f"train.out_dir={tmp_path}"]) == 0
    assert "# a real run would stop here: train.out_dir" in capsys.readouterr().out
    assert main(["train", "--dry-run", "--resume"] + ok + [f"train.out_dir={tmp_path}"]) == 0
    assert "# resumes from step 3" in capsys.readouterr().out


def test_resume_without_checkpoint_is_refused(capsys, ok, tmp_path):
    _one_line_error(capsys, ["train", "--resume"] + ok + [f"train.out_dir={tmp_path / 'none'}"], "--resume",
                    "does not exist", "--auto-resume")
    (tmp_path / "empty").mkdir()
    _one_line_error(capsys, ["train", "--resume"] + ok + [f"train.out_dir={tmp_path / 'empty'}"], "holds no run")


def test_resume_and_overwrite_exclude_each_other(capsys, ok, tmp_path):
    _one_line_error(capsys, ["train", "--resume", "--overwrite"] + ok + [f"train.out_dir={tmp_path}"], "--overwrite")


def test_sft_into_a_train_run_is_refused(capsys, ok, tmp_path):
    _old_run(tmp_path)
    _one_line_error(capsys, ["sft", "--resume"] + ok + [f"train.out_dir={tmp_path}"], "'train' run", "not a 'sft' run")


def test_debug_shows_the_traceback(capsys, ok):
    assert main(["train", "--dry-run"] + ok + ["--debug", "algorithm.name=grpoo"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "build_algorithm" in err and err.strip().splitlines()[-1].startswith("mmrl: error:")


def test_version_and_help_show_defaults(capsys):
    from mmrl import __version__

    with pytest.raises(SystemExit):
        main(["--version"])
    assert __version__ in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["data", "synth", "--help"])
    out = capsys.readouterr().out
    assert "(default: 8)" in out and "--fixed-options" in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "``" not in capsys.readouterr().out  # no RST markup


# ---- hostile inputs that need the tiny model -----------------------------------------------------------------
def _register(name, fn):
    from mmrl.rewards import REWARDS

    if name not in REWARDS:
        REWARDS.register(name)(fn)


def _small(world, out, model):
    from support import small_overrides

    return small_overrides(world, out, model) + ["train.steps=3", "data.shuffle=false"]


@pytest.mark.slow
def test_reward_returning_a_string(capsys, video_world, tiny_model_path, tmp_path):
    _register("test_says_yes", lambda ctx: ["yes"] * len(ctx))
    _one_line_error(capsys, ["train", "--quiet"] + _small(video_world, tmp_path / "r", tiny_model_path)
                    + ["rewards=[{name: test_says_yes}]"], "reward 'test_says_yes'", "'yes'", "expected a number")


@pytest.mark.slow
def test_reward_raising_mid_run_keeps_a_checkpoint_and_debug_shows_its_traceback(capsys, video_world, tiny_model_path,
                                                                                  tmp_path):
    calls = {"n": 0}

    def flaky_user_reward(ctx):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("my reward broke")
        return [0.0] * len(ctx)

    _register("test_flaky", flaky_user_reward)
    argv = ["train", "--quiet"] + _small(video_world, tmp_path / "r", tiny_model_path) + ["rewards=[{name: test_flaky}]"]
    _one_line_error(capsys, argv, "reward 'test_flaky'", "my reward broke")
    assert (tmp_path / "r" / "checkpoints" / "step_000001").is_dir() and not (tmp_path / "r" / "final").exists()
    calls["n"] = 1
    assert main(argv + ["--overwrite", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "flaky_user_reward" in err  # the user's own frame


def _broken_world(src, dst, n_broken=None):
    shutil.copytree(src, dst)
    for mp4 in sorted((dst / "videos").glob("*.mp4"))[:n_broken]:
        mp4.write_bytes(b"garbage")
    return dst


@pytest.mark.slow
def test_all_bad_data_is_refused(capsys, video_world, tiny_model_path, tmp_path):
    world = _broken_world(video_world, tmp_path / "w")
    base = ["train", "--quiet", "data.on_error=skip"] + _small(world, tmp_path / "r", tiny_model_path)
    # the pre-flight's media probe finds them all before anything loads
    _one_line_error(capsys, base, "train.json", "none of its 24 items is usable", "unreadable video")
    base.append("data.preflight=none")  # the probe off: they are met during the steps
    # every file bad: refused once every sample has failed, even with max_skip_frac=1, and nothing is exported
    _one_line_error(capsys, base + ["train.steps=10", "data.max_skip_frac=1.0"], "train.json",
                    "none of its 24 items is usable", "skipped.jsonl")
    assert not (tmp_path / "r" / "final").exists()
    rows = [json.loads(x) for x in (tmp_path / "r" / "skipped.jsonl").read_text().splitlines()]
    assert len(rows) == 24 and all(r["stage"] == "rollout" and r["file"].endswith(".mp4") for r in rows)
    # the default limit stops at the first step that crosses it
    _one_line_error(capsys, base + ["--overwrite"], "3 of 24 samples skipped (12.5%)", "data.max_skip_frac=0.1")
    # every item rejected when the file is read
    items = json.loads((world / "train.json").read_text())
    (world / "noanswer.json").write_text(json.dumps([{k: v for k, v in it.items() if k != "answer"} for it in items]))
    _one_line_error(capsys, base + ["--overwrite", f"data.train={world / 'noanswer.json'}"], "noanswer.json",
                    "none of its 24 items is usable", "'answer': missing")


def test_one_frame_clip_and_decoder_noise_become_one_error(tmp_path, capfd):
    """qwen-vl-utils' "nframes should in interval [2, 1]" and decord's own stderr lines are translated into the
    DataError naming sample and file."""
    from PIL import Image

    from mmrl.data.schema import VideoRef
    from mmrl.errors import DataError
    from mmrl.media.decode import decode_video

    (tmp_path / "one").mkdir()
    Image.new("RGB", (56, 56)).save(tmp_path / "one" / "000.jpg")
    with pytest.raises(DataError, match=r"sample 's1', file '.*one': clip has 1 frame\(s\) in range; .* at least 2"):
        decode_video(VideoRef(str(tmp_path / "one"), nframes=1), "s1")
    (tmp_path / "bad.mp4").write_bytes(b"garbage" * 10)
    with pytest.raises(DataError, match=r"sample 's2', file '.*bad.mp4': unreadable video"):
        decode_video(VideoRef(str(tmp_path / "bad.mp4")), "s2")
    assert "ERROR" not in capfd.readouterr().err


def test_no_data_check_plans_for_another_machine_only(capsys, tmp_path):
    over = ["model.path=/models/qwen7b", "data.train=/data/train.json", f"train.out_dir={tmp_path / 'r'}"]
    assert main(["train", "--dry-run", "--no-data-check"] + over) == 0
    assert "# plan: mmrl train" in capsys.readouterr().out
    _one_line_error(capsys, ["train", "--dry-run", "--no-data-check"] + over + ["train.lr=0"], "'train.lr'")
    _one_line_error(capsys, ["train", "--no-data-check"] + over, "'model.path'")  # a real run: paths still checked
    _one_line_error(capsys, ["train", "--dry-run"] + over, "'model.path'")
