"""The run report (mmrl/train/report.py): one quantity per axis, held-out curves per question type, the step-time
breakdown, resume markers, and `mmrl report` overlaying runs."""
import json

import pytest

from mmrl.cli import main
from mmrl.errors import ConfigError
from mmrl.train.metrics import MetricsLogger, read_resumes
from mmrl.train.report import FIGURES, _axes_for, compare_runs, write_report


def _rows(n=40, acc=0.5):
    rows = []
    for i in range(1, n + 1):
        r = {"step": i, "reward/total": acc, "reward/accuracy": acc, "reward/format": 1.0, "loss": 1e-8 * i,
             "kl": 0.0, "grad_norm": 3.0, "entropy": 6.4, "adv/zero_frac": 0.2, "truncated_frac": 0.0,
             "train_frac": 1.0, "response_len": 2.0, "tokens_per_s": 150.0, "time/rollout": 1.0,
             "time/scoring": 0.5, "time/update": 2.0, "time/step": 3.5, "lr": 1e-4}
        if i % 10 == 0:
            r.update({"eval/accuracy": acc, "eval/acc_color": 0.9, "eval/acc_count": 0.3})
        rows.append(r)
    return rows


def _write(run, rows):
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_each_axis_holds_one_quantity():
    keys = sorted(_rows()[9])
    axes = {title: (found, kind) for fig, _, spec in FIGURES for title, found, kind in _axes_for(spec, keys, False, False)}
    # loss, KL and grad norm never share an axis; entropy is not on the 0-1 axis of the shares
    assert axes["policy loss"][0] == ["loss"] and axes["KL to the reference"][0] == ["kl"]
    assert axes["grad norm (before clipping)"][0] == ["grad_norm"]
    assert axes["token entropy (nats)"][0] == ["entropy"]
    assert axes["shares"] == (["adv/zero_frac", "truncated_frac", "train_frac"], "frac")
    assert axes["held-out accuracy by question type"][0] == ["eval/accuracy", "eval/acc_color", "eval/acc_count"]
    assert axes["seconds per step"] == (["time/rollout", "time/scoring", "time/update"], "stack")
    assert axes["reward/accuracy"][0] == ["reward/accuracy"] and "reward/total" not in axes  # total has its own
    assert "SFT seconds per step" not in axes  # an RL run's step time is the stack
    # overlaid runs: every key its own axis (the lines are the runs)
    over = [t for _, _, spec in FIGURES for t, found, _ in _axes_for(spec, keys, True, False)]
    assert "held-out accuracy by question type: color" in over and "seconds per step: rollout" in over


def test_report_draws_every_figure_and_marks_resumes(tmp_path):
    run = tmp_path / "run"
    _write(run, _rows())
    MetricsLogger(str(run), resume_step=20, tensorboard=False)  # a resume at step 20 keeps rows 1..20
    assert read_resumes(run) == [20]
    MetricsLogger(str(run), resume_step=10, tensorboard=False)  # resumed again from an earlier checkpoint
    assert read_resumes(run) == [10]
    _write(run, _rows())
    MetricsLogger(str(run), resume_step=30, tensorboard=False)
    assert read_resumes(run) == [10, 30]
    text = write_report(str(run)).read_text()
    assert "Resumed at step 10, 30" in text
    for png in ("rewards.png", "heldout.png", "optim.png", "policy.png", "speed.png"):
        assert (run / png).stat().st_size > 1000 and f"]({png})" in text
    MetricsLogger(str(run), resume_step=0, tensorboard=False)  # a fresh start forgets the resumes
    assert read_resumes(run) == []


def test_mmrl_report_overlays_runs(tmp_path, capsys):
    a, b = tmp_path / "a" / "rl", tmp_path / "b" / "rl"
    _write(a, _rows(acc=0.4))
    _write(b, _rows(acc=0.7))
    out = tmp_path / "cmp"
    assert main(["report", str(a), str(b), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "| 1: rl |" in text and "| 2: rl |" in text and "![held-out accuracy](heldout.png)" in text
    assert main(["report", str(a), str(b)]) == 2  # several runs need --out
    assert "give --out" in capsys.readouterr().err
    assert main(["report", str(a)]) == 0 and (a / "report.md").exists()
    with pytest.raises(ConfigError, match="no metrics.jsonl"):
        compare_runs([str(a), str(tmp_path)], str(out))


def test_every_line_is_named_and_crowded_fraction_axes_keep_their_legend_off_the_curves():
    from mmrl.train.report import legend_place

    assert legend_place(0, "line") is None
    assert legend_place(1, "frac") == "inside"  # one view's accuracy still says which view
    assert legend_place(1, "line") == "inside"
    assert legend_place(2, "line") == "inside"
    assert legend_place(2, "frac") == "beside"  # shares, per-view accuracy: 0-1 curves fill the box
    assert legend_place(4, "line") == "beside"


def test_a_lone_view_curve_is_drawn_with_its_name(tmp_path, monkeypatch):
    import matplotlib.axes

    from mmrl.train.report import Run, plot_figure

    labels = []
    real = matplotlib.axes.Axes.legend
    monkeypatch.setattr(matplotlib.axes.Axes, "legend", lambda ax, *a, **k: (
        labels.extend(ax.get_legend_handles_labels()[1]), real(ax, *a, **k))[1])
    _write(tmp_path / "r", [{"step": i, "view_acc/original": 0.5} for i in range(1, 6)])
    spec = dict((f, axes) for f, _, axes in FIGURES)["views.png"]
    assert plot_figure([Run(str(tmp_path / "r"))], spec, tmp_path / "v.png", "views")
    assert labels == ["original"]
