"""Progress when stdout is not a terminal (SLURM, nohup): one line per step, at most one every train.log_every_s."""
import io

import pytest

from mmrl.train.progress import StepProgress, duration


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_lines_every_n_seconds_to_a_non_terminal_stream():
    """10 steps of 10 s each, every_s=30: lines at steps 1 (the first), 4 (30 s after step 1), 7, and 10 (the last)."""
    out, clock = io.StringIO(), Clock()
    with StepProgress(10, "train", every_s=30.0, stream=out, clock=clock) as p:
        for step in range(1, 11):
            clock.t += 10.0
            p.update(step, {"reward/total": 0.5 + step / 100, "reward/accuracy": 0.25, "kl": 0.0012,
                            "tokens_per_s": 35.25, "note": "text"})
    lines = out.getvalue().splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["train step 1/10 (10%)", "train step 4/10 (40%)",
                                                      "train step 7/10 (70%)", "train step 10/10 (100%)"]
    # step 4: 40 s elapsed over 4 steps = 10.0 s/step, 6 steps left = 60 s
    assert lines[1] == ("train step 4/10 (40%) | reward 0.540 | acc 0.250 | kl 0.0012 | tok/s 35.2 | 10.0 s/step | "
                        "elapsed 40s | left 1m00s")
    assert lines[-1].endswith("| left 0s")


def test_every_step_and_resume_pace():
    """every_s=0: a line per step; resumed at step 5, the pace counts this process's steps only."""
    out, clock = io.StringIO(), Clock()
    with StepProgress(8, "sft", start=5, every_s=0, stream=out, clock=clock) as p:
        for step in (6, 7):
            clock.t += 4.0
            p.update(step, {"sft/loss": 1.23456})
    assert out.getvalue().splitlines() == ["sft step 6/8 (75%) | loss 1.2346 | 4.0 s/step | elapsed 4s | left 8s",
                                           "sft step 7/8 (87%) | loss 1.2346 | 4.0 s/step | elapsed 8s | left 4s"]


def test_quiet_prints_nothing_and_a_terminal_gets_the_bar():
    out = io.StringIO()
    with StepProgress(3, "train", disable=True, stream=out) as p:
        p.update(1, {"reward/total": 1.0})
    assert out.getvalue() == ""

    class Tty(io.StringIO):
        def isatty(self):
            return True

    with StepProgress(3, "train", stream=Tty()) as p:
        assert p.bar is not None
        p.update(1, {"reward/total": 1.0})
        assert p.bar.tasks[0].completed == 1 and p.bar.tasks[0].fields["info"] == "reward 1.000"


@pytest.mark.parametrize("seconds, text", [(49.4, "49s"), (185, "3m05s"), (7620, "2h07m"), (-3, "0s")])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_log_every_s_is_validated():
    from mmrl.config import load_config
    from mmrl.errors import ConfigError

    assert load_config(None, []).train.log_every_s == 30.0
    with pytest.raises(ConfigError, match=r"config key 'train.log_every_s' must be >= 0"):
        load_config(None, ["train.log_every_s=-1"])


def test_an_evaluating_step_always_gets_a_line():
    out, clock = io.StringIO(), Clock()
    with StepProgress(10, "train", every_s=1000.0, stream=out, clock=clock) as p:
        for step in range(1, 6):
            clock.t += 1.0
            p.update(step, {"eval/accuracy": 0.59} if step == 3 else {})
    assert [x.split(" | ")[:2] for x in out.getvalue().splitlines()] == [["train step 1/10 (10%)", "1.0 s/step"],
                                                                       ["train step 3/10 (30%)", "held-out acc 0.590"]]
