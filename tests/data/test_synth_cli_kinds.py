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


@pytest.mark.parametrize("kind,flags,needle", [
    ("mood", ["--unsupported-source", "prior"], "--unsupported-source"),
    ("claims", ["--time-in-question"], "--time-in-question"),
    ("video", ["--teacher-seek", "exact"], "--teacher-seek"),
    ("claims", ["--prior", "tint"], "--prior"),
    ("image", ["--n-val", "2"], "--n-val"),
    ("video", ["--duration", "0"], "--duration"),
])
def test_synth_kind_only_flags_are_refused_elsewhere(tmp_path, kind, flags, needle):
    p = subprocess.run([sys.executable, "-m", "mmrl", "data", "synth", "--kind", kind, "--out", str(tmp_path / "w"),
                        *flags], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and needle in p.stderr and kind in p.stderr


def test_synth_seek_and_claims_flags_reach_the_world(tmp_path):
    seek = tmp_path / "seek"
    p = subprocess.run([sys.executable, "-m", "mmrl", "data", "synth", "--kind", "seek", "--out", str(seek),
                        "--n-train", "2", "--n-test", "1", "--time-in-question", "--fixed-options",
                        "--teacher-seek", "exact", "--n-val", "1"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert [v["id"] for v in json.loads((seek / "val.json").read_text())] == ["val-00000"]
    items = json.loads((seek / "train.json").read_text())
    assert all(" s?" in it["question"] for it in items)  # "What colour flashes between 13 and 15 s?"
    assert all(len(it["candidates"]) == 4 for it in items)
    first = json.loads((seek / "teacher.jsonl").read_text().splitlines()[0])
    assert "." in json.dumps(first)  # exact seconds are floats
    claims = tmp_path / "claims"
    p = subprocess.run([sys.executable, "-m", "mmrl", "data", "synth", "--kind", "claims", "--out", str(claims),
                        "--n-train", "8", "--n-test", "1", "--unsupported-source", "prior"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    for it in json.loads((claims / "train.json").read_text()):  # a prior for each attribute; unsupported claims repeat it
        priors = it["meta"]["priors"]
        for claim in it["meta"]["claims"]:
            if not claim["supported"]:
                assert priors[claim["attribute"]] in claim["text"]
