"""bench/pacg_preflight.py: the trace-room check, the gate statistics and the Welch interval on hand values, and
one seed on the tiny model (plumbing: the untrained model never stops, so the 5% truncation rule fails the bench)."""
import json
import math

import pytest
from support import load_bench


def _bench():
    return load_bench("pacg_preflight")


def test_trace_room():
    b = _bench()
    assert b.check_trace_room(64, [50, 49]) == 50
    with pytest.raises(ValueError, match=r"max_new_tokens = 50 does not exceed the longest SFT trace \(50 tokens"):
        b.check_trace_room(50, [50])


def _row(sup, content):
    return {"supported": sup, "claim_patch": 0.99, "claim_full": 0.99, "content_patch": content, "content_full": content}


def test_gate_stats_on_the_spec_vector():
    b = _bench()
    # the spec's vector P = [0.2, 0.3, 0.25, 0.95]: only the 4th is flagged (z 1.49), gain 0.755; a claim without a
    # content word (NaN) is left out of the content gate
    rows = [_row(True, 0.2), _row(True, 0.3), _row(False, 0.25), _row(False, 0.95), _row(None, float("nan"))]
    g = b.gate_stats(rows, "content_full")
    assert g["claims"] == 4.0 and g["flagged"] == 0.25 and g["at_one"] == 0.0
    assert g["gain_flagged"] == pytest.approx(0.755, abs=1e-3)
    assert g["flagged_supported"] == 0.0 and g["flagged_unsupported"] == 0.5
    only_sup = b.gate_stats([_row(True, 0.2), _row(True, 0.9)], "content_full")
    assert math.isnan(only_sup["flagged_unsupported"])  # no unsupported claim: no share (not 0)
    flat = b.gate_stats(rows, "claim_full")  # all equal: σ = 0 flags nothing
    assert flat["claims"] == 5.0 and flat["flagged"] == 0.0 and math.isnan(flat["gain_flagged"])


def test_welch_interval_on_hand_values():
    b = _bench()
    d, lo, hi = b.diff_ci([1.0, 2.0, 3.0], [0.0, 0.0, 1.0, 1.0])
    # means 2 and 0.5; se² = 1/3 + (1/3)/4 = 0.41667; Welch dof = 0.41667² / ((1/3)²/2 + (1/12)²/3) = 2.98 -> t(3) 3.182
    assert d == pytest.approx(1.5)
    assert hi - d == pytest.approx(3.182 * math.sqrt(0.416667), abs=2e-3) and d - lo == pytest.approx(hi - d)
    assert all(math.isnan(x) for x in b.diff_ci([1.0], [2.0, 3.0]))


@pytest.mark.slow
def test_one_seed_on_the_tiny_model_fails_the_truncation_rule_then_renders(tiny_model_path, tmp_path):
    b = _bench()
    from _protocol import ProtocolError

    out = tmp_path / "pf"
    args = ["--seeds", "0", "--smoke", "--n-train", "4", "--n-val", "2", "--n-test", "4", "--sft-steps", "1",
            "--group-size", "2", "--model", tiny_model_path, "--out", str(out)]
    failed = tmp_path / "failed.md"
    with pytest.raises(ProtocolError, match=r"^seed 0: protocol: .*% of 4 sampled responses \(groups\) were cut at "
                                            r"max_new_tokens = 128, above the 5% limit; raise max_new_tokens$"):
        b.main(args + ["--report", str(failed)])
    head, rest = failed.read_text().split("## Pre-flight (SFT start, before any RL)")
    assert "## FAILED: the 5% truncation rule (`_preflight.check_truncation`)" in head and "PACG's gate" in rest
    assert "seed 0: no claim to gate" in rest  # the untrained model writes no <think> claims
    rec = json.loads((out / "seed0" / "preflight.json").read_text())
    assert len(rec["truncated"]["greedy"]) == len(rec["truncated"]["sampled"]) == 4 and rec["longest_trace"] < 128
    assert [len(g) for g in rec["groups"]["truncated"]] == [2, 2]
    world = json.loads((out / "seed0" / "world" / "test.json").read_text())
    assert len(world) == 4 and all("priors" in it["meta"] for it in world)  # the prior-driven world
    # the same record with no response cut (and hand claims) renders the pre-flight and the gate tables
    rec["groups"]["truncated"] = [[False, False], [False, False]]
    rec["truncated"] = {"greedy": [False] * 4, "sampled": [False] * 4}
    hand = [_row(True, 0.2), _row(True, 0.3), _row(False, 0.25), _row(False, 0.95)]
    rec["claims"] = {"sampled": hand, "greedy": hand[:2]}
    (out / "seed0" / "preflight.json").write_text(json.dumps(rec))
    report = tmp_path / "report.md"
    report.write_text("# Earlier results\n\nold table\n")
    text = b.main(args + ["--render-only", "--report", str(report)])
    assert report.read_text() == text.rstrip("\n") + "\n\n" + b.MARK + "\n\n# Earlier results\n\nold table\n"
    b.main(args + ["--render-only", "--report", str(report)])  # a rerun replaces its own section only
    assert report.read_text().count(b.MARK) == 1 and report.read_text().count("old table") == 1
    assert "SMOKE RUN" in text
    assert "## Pre-flight (SFT start, before any RL)" in text and "PACG (content, full)" in text
    sampled, greedy = text.split("## PACG's gate on the SFT start: greedy")
    assert "| 0 | content | full | 4 | 0.0 | 25.0 | 0.755 | 0.0 | 50.0 |" in sampled
    assert "| 0 | claim | full | 4 | 0.0 | 0.0 | — | 0.0 | 0.0 |" in sampled  # all at 0.99: σ = 0 flags nothing
    assert "seed 0 4 (2 unsupported)" in sampled and "seed 0 2 (0 unsupported)" in greedy
    assert "## Can PACG act?" in text and "can act on seed(s) [0]" in text


def test_write_top_keeps_the_earlier_tables_below(tmp_path):
    b = _bench()
    f = tmp_path / "pacg.md"
    b.write_top(f, "# new\n")
    assert f.read_text() == "# new\n\n" + b.MARK + "\n"
    f.write_text("# Earlier\n\nold\n")
    b.write_top(f, "# run 1\n")
    b.write_top(f, "# run 2\n")
    assert f.read_text() == "# run 2\n\n" + b.MARK + "\n\n# Earlier\n\nold\n"
