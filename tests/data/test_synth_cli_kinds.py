"""`mmrl data synth --kind claims|mood|seek` writes loadable worlds; `mmrl diagnose` is a subcommand."""
import json
import subprocess
import sys

import pytest

from mmrl.data.annotations import load_samples


@pytest.mark.parametrize("kind", ["claims", "mood", "seek"])
def test_synth_kind_writes_a_loadable_world(tmp_path, kind):
    out = tmp_path / kind
    p = subprocess.run([sys.executable, "-m", "mmrl", "data", "synth", "--kind", kind, "--out", str(out),
                        "--n-train", "3", "--n-test", "2"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    info = json.loads(p.stdout)
    assert info
    train, skipped = load_samples(str(out / "train.json"))
    test, _ = load_samples(str(out / "test.json"))
    assert len(train) == 3 and len(test) == 2 and not skipped


def test_synth_fixed_options_is_refused_for_image_kinds(tmp_path):
    p = subprocess.run([sys.executable, "-m", "mmrl", "data", "synth", "--kind", "mood", "--out", str(tmp_path / "m"),
                        "--fixed-options"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--fixed-options" in p.stderr


def test_diagnose_is_a_subcommand():
    p = subprocess.run([sys.executable, "-m", "mmrl", "diagnose", "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "--checkpoint" in p.stdout
