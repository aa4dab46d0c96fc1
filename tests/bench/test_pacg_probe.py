"""bench/pacg_probe.py: the content / template split of each claim and the z-gate shares on hand-made rows, and the
probe on the tiny model (plumbing)."""
import sys
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import pacg_probe  # noqa: E402


def _row(sup, p_patch, p_full):
    return {"supported": sup, "tokens": 10, "content_tokens": 1, "P_patch": p_patch, "P_full": p_full,
            "R_content_patch": p_patch, "R_template_patch": 1.0, "R_content_full": p_full, "R_template_full": 1.0}


def test_table_counts_and_gate_shares():
    # patch: three claims at 1 and one low -> the top sits at z = 0.5, nothing is flagged; full: the spec's vector
    rows = [_row(True, 1.0, 0.2), _row(True, 1.0, 0.3), _row(False, 1.0, 0.25), _row(False, 0.5, 0.95)]
    out = pacg_probe.table(rows)
    cells = {x.split(" | ")[0]: [c.strip() for c in x.strip("| ").split("|")][1:] for x in out.splitlines()
             if x.startswith(("| patch |", "| full |"))}
    assert cells["| patch"] == ["0.750", "0.000", "0.000", "0.000"]
    assert cells["| full"] == ["0.000", "0.250", "0.000", "0.500"]  # the spec vector: only its 4th claim
    assert "| unsupported | 2 | 10.000 (1.000) | full | 0.600 | 0.600 | 1.000 |" in out


def test_probe_runs_on_the_tiny_model(tiny_model_path, tmp_path):
    from mmrl.config import load_config, to_yaml
    from mmrl.data.synth_claims import make_claims_world

    make_claims_world(str(tmp_path), 2, 2, seed=0)
    cfg = load_config(None, ["data.max_pixels=3136"])
    (tmp_path / "run.yaml").write_text(to_yaml(cfg))
    assert yaml.safe_load((tmp_path / "run.yaml").read_text())["data"]["max_pixels"] == 3136
    rows = pacg_probe.probe(tiny_model_path, str(tmp_path), str(tmp_path / "run.yaml"), limit=2, max_new_tokens=4)
    assert isinstance(rows, list)  # an untrained model writes no <think> claims; the pass itself must run
    assert "| patch |" in pacg_probe.table(rows)
