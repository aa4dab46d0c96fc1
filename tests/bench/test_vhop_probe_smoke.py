"""Smoke run of bench/vhop_probe.py with --worlds: SFT over two joined worlds, held-out top-1 on a third world."""
import json

import pytest
from support import load_bench


def _load():
    return load_bench("vhop_probe")


@pytest.mark.slow
def test_vhop_probe_trains_on_many_worlds(tmp_path, capsys):
    probe = _load()
    out = tmp_path / "p"
    probe.main(["--out", str(out), "--worlds", "2", "--n-train", "5", "--n-test", "5", "--steps", "2", "--size", "56",
                "--shapes", "1", "--colours", "8", "--scene-cap", "8", "--emblem-scale", "0.45",
                "--index-refresh", "1"])
    res = json.loads((out / "probe.json").read_text())
    assert res["queries"] == {"train": 10, "test": 5}
    assert res["held_out"]["n/t0"] == 5 and res["held_out"]["n/t1+"] == 0 + 1 + 2 + 3 + 4
    assert res["train"]["n/t0"] == 10  # spread over both worlds
    cfg = (out / "sft" / "config.yaml").read_text()
    assert "worlds/*/queries_train.json" in cfg
    capsys.readouterr()
    probe.main(["--summarise", str(out)])
    row = capsys.readouterr().out.splitlines()[-1]
    assert row.startswith("| 8 x 1, 8, 0.45, 56 | 2 | 10 (") and row.count("|") == 12
    assert "top1_in_scene/t0" in res["held_out"]
