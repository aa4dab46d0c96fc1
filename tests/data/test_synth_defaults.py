"""`mmrl data synth --kind K` runs with its defaults for every kind (issue 27: vhop's 512 default queries overran its
world's (scene, object) slots for every seed)."""
from __future__ import annotations

import json

import pytest

from mmrl.cli import build_parser, main
from mmrl.cli_synth import _COUNTS


def _kinds():
    synth = build_parser()._subparsers._group_actions[0].choices["data"]._subparsers._group_actions[0].choices["synth"]
    return next(a for a in synth._actions if a.dest == "kind").choices


@pytest.mark.parametrize("kind", _kinds())
def test_every_kind_runs_with_its_world_defaults(kind, tmp_path, capsys):
    """Every world parameter at its default (size, frames, fps, duration...), few items: fast."""
    assert main(["data", "synth", "--kind", kind, "--out", str(tmp_path / kind), "--n-train", "3", "--n-test", "2"]) == 0
    assert json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_vhop_default_counts_fit_its_world(tmp_path, capsys):
    """The whole default: 200 train and 50 test queries (a split holds 32 scenes x 40 objects)."""
    assert _COUNTS["vhop"] == (200, 50)
    assert main(["data", "synth", "--kind", "vhop", "--out", str(tmp_path / "v")]) == 0, capsys.readouterr().err
    queries = json.loads((tmp_path / "v" / "queries_train.json").read_text())
    items = queries["queries"]
    assert len(items) == 200


def test_vhop_past_its_world_is_one_line(tmp_path, capsys):
    assert main(["data", "synth", "--kind", "vhop", "--out", str(tmp_path / "v"), "--n-train", "512", "--n-test", "1"]) == 2
    assert "ran out of free (scene, object) slots" in capsys.readouterr().err
