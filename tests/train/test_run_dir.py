"""Run-directory rules (mmrl.train.run_dir), checkpoint ownership and the TensorBoard purge after a resume."""
import json

import pytest
import torch

from mmrl.errors import ConfigError
from mmrl.train.checkpoint import save_checkpoint
from mmrl.train.run_dir import checkpoints, open_run, owner


def _save(out, step, keep=2):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    return save_checkpoint(str(out), step, model, opt, None, {"data": {}}, keep=keep)


def _quiet(*_):
    pass


def test_fresh_directory_is_opened_and_marked(tmp_path):
    rd = open_run(str(tmp_path / "r"), "train", say=_quiet)
    assert rd.checkpoint is None and rd.resume_step == 0
    assert json.loads((tmp_path / "r" / "run.json").read_text()) == {"run_id": rd.run_id, "kind": "train"}
    # a directory that holds no run data (only run.json / config.yaml of a run that never logged) is reusable
    assert open_run(str(tmp_path / "r"), "train", say=_quiet).run_id != rd.run_id


def test_previous_run_is_refused_then_resumed_or_overwritten(tmp_path):
    out = tmp_path / "r"
    rd = open_run(str(out), "train", say=_quiet)
    _save(out, 1)
    _save(out, 2)
    (out / "metrics.jsonl").write_text('{"step": 2}\n')
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"already holds a run \(metrics.jsonl, checkpoints up to step 2\)"):
        open_run(str(out), "train", say=_quiet)
    said = []
    again = open_run(str(out), "train", resume=True, say=said.append)
    assert again.run_id == rd.run_id and again.resume_step == 2 and again.checkpoint.name == "step_000002"
    assert said == [f"mmrl: resuming train run in {out} from step 2 ({out / 'checkpoints' / 'step_000002'})"]
    assert open_run(str(out), "train", resume="auto", say=_quiet).resume_step == 2
    new = open_run(str(out), "train", overwrite=True, say=_quiet)
    assert new.run_id != rd.run_id and not (out / "checkpoints").exists() and not (out / "metrics.jsonl").exists()
    assert (out / "notes.txt").read_text() == "mine"  # only the run's own artifacts are deleted


def test_resume_needs_a_checkpoint_and_auto_resume_starts_fresh(tmp_path):
    with pytest.raises(ConfigError, match="does not exist; nothing to resume from"):
        open_run(str(tmp_path / "missing"), "train", resume=True, say=_quiet)
    out = tmp_path / "r"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1}\n')  # crashed before its first checkpoint
    with pytest.raises(ConfigError, match=r"holds no checkpoint \(metrics.jsonl\)"):
        open_run(str(out), "train", resume=True, say=_quiet)
    said = []
    rd = open_run(str(out), "train", resume="auto", say=said.append)
    assert rd.checkpoint is None and not (out / "metrics.jsonl").exists()
    assert any("starting at step 0" in s for s in said)


def test_kind_mismatch_and_flag_conflict(tmp_path):
    out = tmp_path / "r"
    open_run(str(out), "sft", say=_quiet)
    _save(out, 5)
    with pytest.raises(ConfigError, match="holds an 'sft' run, not a 'train' run"):
        open_run(str(out), "train", resume=True, say=_quiet)
    with pytest.raises(ConfigError, match="exclude each other"):
        open_run(str(out), "sft", resume=True, overwrite=True, say=_quiet)
    with pytest.raises(ConfigError, match="is a file"):
        (tmp_path / "f").write_text("")
        open_run(str(tmp_path / "f"), "train", say=_quiet)


def test_check_only_touches_nothing(tmp_path):
    out = tmp_path / "r"
    open_run(str(out), "train", check_only=True, say=_quiet)
    assert not out.exists()


def test_pruning_never_deletes_a_foreign_checkpoint(tmp_path):
    """The bug of issue 12: a later-numbered checkpoint of an old run made keep_checkpoints prune the new run's
    first checkpoint at once, and a resume then continued from the old run."""
    out = tmp_path / "r"
    open_run(str(out), "train", say=_quiet)
    foreign = out / "checkpoints" / "step_000009"
    foreign.mkdir(parents=True)
    (foreign / "owner.json").write_text(json.dumps({"run_id": "someone-else"}))
    for step in (1, 2, 3):
        _save(out, step, keep=2)
    names = [p.name for p in checkpoints(out)]
    assert names == ["step_000002", "step_000003", "step_000009"]
    rd = open_run(str(out), "train", resume=True, say=_quiet)
    assert rd.checkpoint.name == "step_000003"  # its own latest, not the foreign step 9
    assert owner(rd.checkpoint) == rd.run_id


def test_keep_zero_keeps_every_checkpoint(tmp_path):
    open_run(str(tmp_path), "train", say=_quiet)
    for step in (1, 2, 3):
        _save(tmp_path, step, keep=0)
    assert len(checkpoints(tmp_path)) == 3


def test_tensorboard_purges_steps_after_the_checkpoint(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from mmrl.train.metrics import MetricsLogger

    log = MetricsLogger(str(tmp_path))
    for step in (1, 2, 3, 4):
        log.log(step, {"x": float(step)})
    log.close()
    log = MetricsLogger(str(tmp_path), resume_step=2)  # killed after 4, resumed from the step-2 checkpoint
    for step in (3, 4):
        log.log(step, {"x": 10.0 * step})
    log.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    events = [(e.step, e.value) for e in acc.Scalars("x")]
    assert events == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]
    assert [r["step"] for r in MetricsLogger.read(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
    log = MetricsLogger(str(tmp_path))  # a fresh start over leftovers (a run that died before its first save)
    log.log(1, {"x": 100.0})
    log.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("x")] == [(1, 100.0)]


def test_wandb_logger_uses_the_run_id_and_logs_numbers(tmp_path, monkeypatch):
    """train.wandb_project: metrics also go to W&B (a stand-in module records the calls); the run id of run.json
    is the W&B id, so a resume continues the same W&B run. Without the package it is a config error up front."""
    import sys
    import types

    from mmrl.config import load_config
    from mmrl.train.metrics import MetricsLogger
    from mmrl.validate import validate

    calls = []

    class Run:
        def log(self, metrics, step):
            calls.append(("log", step, metrics))

        def finish(self):
            calls.append(("finish",))

    fake = types.ModuleType("wandb")
    fake.init = lambda **kw: calls.append(("init", kw)) or Run()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    rd = open_run(str(tmp_path), "train", say=_quiet)
    log = MetricsLogger(str(tmp_path), wandb_project="proj", config={"a": 1})
    log.log(1, {"x": 0.5, "note": "text"})
    log.close()
    init = calls[0][1]
    assert init["project"] == "proj" and init["id"] == rd.run_id and init["resume"] == "allow" and init["config"] == {"a": 1}
    assert calls[1:] == [("log", 1, {"x": 0.5}), ("finish",)]
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    cfg = load_config(None, ["train.wandb_project=proj"])
    cfg.data.train = __file__
    with pytest.raises(ConfigError, match="'train.wandb_project' needs the wandb package"):
        validate(cfg, "sft")
