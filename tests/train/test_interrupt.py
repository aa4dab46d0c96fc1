"""SIGINT / SIGTERM during SFT and RL: a checkpoint at the next step boundary, exit 128 + signal, a one-line
resume command; running that command finishes the run exactly as an uninterrupted one (metrics and weights)."""
import json
import os
import shlex
import signal

import pytest
import torch

from support import small_overrides, without_measurements
from mmrl.cli import main
from mmrl.train.metrics import MetricsLogger

KINDS = {
    "sft": ["sft.steps=4", "sft.batch_size=4", "train.micro_batch=4", "sft.lr=1e-3", "train.keep_checkpoints=0"],
    "train": ["train.steps=3", "rewards=[{name: test_even_tokens}]"],
}


def _register_even_tokens():
    """A random-init model never answers a letter: reward the share of even token ids (varies within groups)."""
    from mmrl.rewards import REWARDS

    if "test_even_tokens" not in REWARDS:
        REWARDS.register("test_even_tokens")(
            lambda ctx: [float((c.trajectory.response_ids % 2 == 0).float().mean()) for c in ctx])


def _argv(kind, world, out, model):
    _register_even_tokens()
    return [kind, "--quiet"] + small_overrides(world, out, model) + ["data.shuffle=true"] + KINDS[kind]


def _rows(out):
    return without_measurements(MetricsLogger.read(out / "metrics.jsonl"))


def _weights(out):
    return torch.load(sorted((out / "checkpoints").glob("step_*"))[-1] / "model.pt")


@pytest.fixture(scope="module")
def straight(video_world, tiny_model_path, tmp_path_factory):
    """The uninterrupted run of each kind, computed once."""
    runs = {}
    for kind in KINDS:
        out = tmp_path_factory.mktemp(f"straight_{kind}")
        assert main(_argv(kind, video_world, out, tiny_model_path)) == 0
        runs[kind] = out
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_signal_checkpoints_and_resume_command_finishes_the_run(kind, sig, straight, video_world, tiny_model_path,
                                                                 tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    at = 2 if kind == "sft" else 1
    log = MetricsLogger.log

    def log_then_signal(self, step, metrics):  # the signal arrives in the middle of the run, after a step's log
        log(self, step, metrics)
        if step == at:
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(MetricsLogger, "log", log_then_signal)
    assert main(_argv(kind, video_world, out, tiny_model_path)) == 128 + sig
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "resume with:" in x)
    assert f"{signal.Signals(sig).name} received: stopped after step {at}" in line
    assert (out / "checkpoints" / f"step_{at:06d}").is_dir() and not (out / "final").exists()
    monkeypatch.setattr(MetricsLogger, "log", log)

    cmd = shlex.split(line.split("resume with: ", 1)[1])
    assert cmd[:3] == ["mmrl", kind, "--resume"]
    assert main(cmd[1:]) == 0
    said = capsys.readouterr().out
    assert f"from step {at}" in said
    assert f"final model   {out / 'final'}" in said and f"metrics       {out / 'metrics.jsonl'}" in said  # summary
    assert _rows(out) == _rows(straight[kind])
    a, b = _weights(out), _weights(straight[kind])
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (out / "final" / "config.json").exists()


@pytest.mark.slow
def test_sft_checkpoints_follow_save_every_and_keep(video_world, tiny_model_path, tmp_path):
    out = tmp_path / "sft"
    argv = ["sft", "--quiet"] + small_overrides(video_world, out, tiny_model_path) + [
        "sft.steps=4", "sft.batch_size=2", "train.save_every=1", "train.keep_checkpoints=2"]
    assert main(argv) == 0
    assert [p.name for p in sorted((out / "checkpoints").glob("step_*"))] == ["step_000003", "step_000004"]
    state = torch.load(out / "checkpoints" / "step_000004" / "trainer_state.pt", weights_only=True)
    assert state["step"] == 4 and state["data"]["pos"] == 8
    assert json.loads((out / "run.json").read_text())["kind"] == "sft"


def test_first_signal_sets_the_flag_second_stops_at_once_and_handlers_come_back(capsys):
    from mmrl.train.interrupt import Interrupted, graceful_stop, resume_command, set_command

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with graceful_stop() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.requested and stop.signum == signal.SIGTERM
            assert "SIGTERM received: saving a checkpoint after the current step" in capsys.readouterr().err
            os.kill(os.getpid(), signal.SIGTERM)
            pytest.fail("the second signal did not stop the block")
    assert signal.getsignal(signal.SIGTERM) is before
    set_command(["--debug", "train", "--config", "c.yaml", "--overwrite", "a=1"])
    assert resume_command("runs/x") == "mmrl --debug train --resume --config c.yaml a=1"
    e = Interrupted(signal.SIGINT, 7, "runs/x/checkpoints/step_000007", "runs/x")
    assert e.exit_code == 130 and str(e).startswith("SIGINT received: stopped after step 7")
