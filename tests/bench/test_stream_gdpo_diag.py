"""The Stream-GDPO offline diagnostic (bench/stream_gdpo_stats.py, bench/stream_gdpo_diag.py) on hand-built vectors:
ranks and Spearman, the zero-spread share and spread per component, the project's advantages compared, the verdict,
and the results file (new section on top, earlier runs kept below)."""
import math

import pytest
from support import load_bench

S = load_bench("stream_gdpo_stats")
W = {"out": 1.0, "fmt": 1.0, "tool": 0.5, "mem": 0.5}


def test_ranks_share_ties_and_spearman_on_hand_vectors():
    assert S.ranks([3.0, 1.0, 2.0, 2.0]) == [4.0, 1.0, 2.5, 2.5]
    assert S.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert S.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert S.spearman([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)  # 1 - 6 * 2 / (3 * 8)
    assert math.isnan(S.spearman([1, 1, 1], [1, 2, 3])) and math.isnan(S.spearman([1], [2]))
    with pytest.raises(ValueError):
        S.spearman([1, 2], [1])


def test_component_spread_counts_constant_groups_and_their_std():
    gids = [0, 0, 0, 0, 1, 1, 1, 1]
    sp = S.component_spread({"out": [1, 0, 0, 1, 1, 1, 1, 1], "fmt": [1, 1, 1, 1, 0, 0, 0, 0]}, gids)
    assert sp["out"]["zero_share"] == 0.5 and sp["fmt"]["zero_share"] == 1.0
    assert sp["out"]["std"] == pytest.approx((math.sqrt(1 / 3) + 0.0) / 2)  # unbiased std of [1,0,0,1], then 0
    assert sp["fmt"]["std"] == 0.0


def test_equal_spread_components_give_correlation_one():
    """Two components that vary alike in each group: the decoupled advantage is the summed one, rho = 1."""
    gids = [0, 0, 0, 0, 1, 1, 1, 1]
    comps = {"out": [1, 0, 0, 1, 0, 1, 0, 0], "fmt": [1, 0, 0, 1, 0, 1, 0, 0]}
    a, b = S.advantages(comps, gids, W)
    for x, y in zip(a, b):
        assert x == pytest.approx(2 * y, abs=1e-3)  # GDPO sums two equal standardised vectors
    agree = S.rank_agreement(a, b, gids)
    assert agree["rho_pooled"] == pytest.approx(1.0) and agree["rho_group_mean"] == pytest.approx(1.0)
    assert agree["rank_differs"] == 0.0 and agree["only_a"] == agree["only_b"] == 0.0
    assert S.no_effect(agree)[0]


def test_a_zero_spread_component_drops_out_of_the_decoupled_advantage():
    gids = [0, 0, 0, 0]
    out = [1.0, 0.0, 1.0, 0.0]
    a_with, _ = S.advantages({"out": out, "fmt": [1.0] * 4, "mem": [0.3] * 4}, gids, W)
    a_alone, _ = S.advantages({"out": out}, gids, W)
    assert a_with == pytest.approx(a_alone) and a_alone[0] > 0 > a_alone[1]


def test_spec_example_reorders_responses():
    """Spec §5 test 1: c=[1,1,0,0], f=[1,0,1,1]: GRPO on the sum ties rollouts 2-4, GDPO separates 2 from 3/4."""
    gids = [0, 0, 0, 0]
    a, b = S.advantages({"out": [1, 1, 0, 0], "fmt": [1, 0, 1, 1]}, gids, {"out": 1.0, "fmt": 1.0})
    assert b == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-3)
    assert a == pytest.approx([1.366, -0.634, -0.366, -0.366], abs=1e-3)
    agree = S.rank_agreement(a, b, gids)
    assert agree["rho_group_mean"] < 0.98 and agree["rank_differs"] == 1.0
    none, why = S.no_effect(agree)
    assert not none and "Spearman pooled" in why


def test_components_that_cancel_in_the_sum_move_only_the_decoupled_advantage():
    gids = [0, 0, 0, 0]
    a, b = S.advantages({"out": [1, 0, 1, 0], "mem": [0, 2, 0, 2]}, gids, W)  # sum = [1, 1, 1, 1]
    assert b == [0.0] * 4 and max(abs(x) for x in a) > 0.4
    agree = S.rank_agreement(a, b, gids)
    assert agree["only_a"] == 1.0 and agree["only_b"] == 0.0
    assert not S.no_effect(agree)[0]


def test_all_zero_advantages_mean_no_effect():
    gids = [0, 0, 1, 1]
    a, b = S.advantages({"out": [1, 1, 0, 0], "fmt": [1, 1, 1, 1]}, gids, W)
    agree = S.rank_agreement(a, b, gids)
    none, why = S.no_effect(agree)
    assert none and "zero or constant" in why


def test_decoupling_follows_the_outcome_when_a_noisy_component_dominates_the_sum():
    """R_mem spreads more than R_out: the summed advantage follows R_mem, the decoupled one R_out more closely."""
    D = load_bench("stream_gdpo_diag")
    comps = {"out": [1, 1, 0, 0], "fmt": [1, 1, 1, 1], "tool": [0, 0, 0, 0], "mem": [0, 3, 1, 2]}
    m = D.mechanism_stats(_rec(0, comps, [0, 0, 0, 0]))
    assert m["out_follow_gdpo"] > m["out_follow_grpo"] and m["multi_varying"] == 1.0
    assert m["zero_fmt"] == 1.0 and m["zero_out"] == 0.0 and m["rho_multi_mean"] < 1.0


def _rec(seed, comps, gids):
    return {"seed": seed, "start": {"acc": {"EPM": 0.5, "CRR": 0.4}, "n": {"EPM": 32, "CRR": 200},
                                    "chance": {"EPM": 0.25, "CRR": 0.45}, "overall": 0.3, "invalid_frac": 0.1},
            "components": comps, "group_ids": gids, "weights": W, "eps": 1e-4,
            "total": [sum(W[k] * comps[k][i] for k in comps) for i in range(len(gids))],
            "n_train_streams": 1, "n_test_streams": 1, "n_blocks": 2, "group_size": 4, "sft_steps": 2, "sft_lr": 3e-4,
            "minutes": {"sft": 1.0, "eval": 1.0, "rollout": 1.0}}


def test_render_writes_the_verdict_on_top_and_keeps_earlier_runs(tmp_path):
    D = load_bench("stream_gdpo_diag")
    gids = [0, 0, 0, 0, 1, 1, 1, 1]
    same = {r: [1, 0, 0, 1, 0, 1, 0, 0] for r in ("out", "fmt")} | {r: [0.0] * 8 for r in ("tool", "mem")}
    text = D.render([_rec(s, same, gids) for s in (0, 1, 2)], "python bench/stream_gdpo_diag.py", smoke=False)
    assert "no effect can exist here; stopped before RL" in text and "SMOKE" not in text
    assert "| 0 | 40.0 vs 45.0 (<= chance) | 50.0 vs 25.0 |" in text  # the harness's two-standard-error rule
    mixed = {"out": [1, 1, 0, 0] * 2, "fmt": [1, 0, 1, 1] * 2, "tool": [0.0] * 8, "mem": [0.0] * 8}
    text2 = D.render([_rec(s, mixed, gids) for s in (0, 1, 2)], "cmd", smoke=False)
    assert "decoupling changes the advantage" in text2 and "100.0%" in text2
    assert "What the RL arms would need (not run)" in text2 and "What the RL arms" not in text
    assert "not above chance on CRR on at least one seed" in text2
    path = tmp_path / "stream.md"
    path.write_text("# old tables\n\nold row\n")
    D.write_report(path, text)
    D.write_report(path, text2)  # a rerun replaces the top section, the earlier runs stay once
    body = path.read_text()
    assert body.startswith("# Stream-GDPO") and body.count("old row") == 1 and body.count(D.MARKER) == 1 and body.count(D.EARLIER) == 1
    assert "decoupling changes the advantage" in body and "stopped before RL" not in body


def test_block_subset_is_seeded_per_stream_and_cuts_a_record():
    D = load_bench("stream_gdpo_diag")
    ids = [f"v{v}@{c}" for v in range(3) for c in (0, 4, 8, 12)]
    keep = D.pick_blocks(ids, 2, seed=7)
    assert keep == D.pick_blocks(ids, 2, seed=7) and len(keep) == 6 and keep == [i for i in ids if i in keep]
    assert all(sum(k.startswith(f"v{v}@") for k in keep) == 2 for v in range(3))
    assert D.pick_blocks(ids, 4, seed=7) == ids
    rec = _rec(0, {r: [float(i) for i in range(8)] for r in ("out", "fmt", "tool", "mem")}, [0, 0, 0, 0, 1, 1, 1, 1])
    rec["block_ids"] = ["v0@0", "v0@4"]
    cut = D.subset_record(rec, ["v0@4"])
    assert cut["group_ids"] == [1] * 4 and cut["components"]["out"] == [4.0, 5.0, 6.0, 7.0]
    assert cut["block_ids"] == ["v0@4"] and cut["n_blocks"] == 1 and cut["minutes"]["rollout"] == 0.5


@pytest.mark.slow
def test_diagnostic_bench_smoke(tiny_model_path, tmp_path):
    """One seed end to end on the tiny model (plumbing only): world, SFT, greedy start, sampled groups, the file."""
    import json

    D = load_bench("stream_gdpo_diag")
    report = tmp_path / "stream.md"
    report.write_text("# earlier\n")
    D.main(["--seeds", "0", "--n-train", "1", "--n-test", "1", "--sft-steps", "1", "--sft-batch", "2", "--group-size",
            "2", "--model", tiny_model_path, "--out", str(tmp_path / "out"), "--report", str(report), "--smoke"])
    rec = json.loads((tmp_path / "out" / "seed0" / "diag.json").read_text())
    assert rec["n_blocks"] == 4 and len(rec["group_ids"]) == 8 == len(rec["total"])
    assert set(rec["components"]) == {"out", "fmt", "tool", "mem"} and set(rec["start"]["acc"]) >= {"EPM", "ATR"}
    body = report.read_text()
    assert "SMOKE RUN" in body and "## Verdict" in body and body.rstrip().endswith("# earlier")
