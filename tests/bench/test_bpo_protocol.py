"""bench/bpo_protocol.py and its table: the validation split, the setting pooled over the seeds' grids, the resumable
seed state, the optional arms' deadline, and the results file's claims on hand-built seed records."""
import json
import sys
import time
from types import SimpleNamespace

import pytest

from tests.support import BENCH

if str(BENCH) not in sys.path:  # the bench modules import their siblings by name (as the bench scripts do)
    sys.path.insert(0, str(BENCH))
import _protocol as P  # noqa: E402
import bpo_preflight as F  # noqa: E402
import bpo_protocol as B  # noqa: E402
import bpo_protocol_table as T  # noqa: E402


def _proto(**kw):
    base = dict(command="python bench/bpo_protocol.py --seeds 0 1 2", seeds=[0, 1, 2], n_test=400, n_val=200,
                lr_grid=[3e-6, 1e-5], kl_grid=[0.0])
    return P.Protocol(**{**base, **kw})


def test_split_validation_moves_the_tail_of_the_test_split(tmp_path):
    test, val = tmp_path / "test.json", tmp_path / "val.json"
    test.write_text(json.dumps([{"id": f"t{i}"} for i in range(7)]))
    F.split_validation(test, val, 5)
    assert [x["id"] for x in json.loads(test.read_text())] == [f"t{i}" for i in range(5)]
    assert [x["id"] for x in json.loads(val.read_text())] == ["t5", "t6"]
    with pytest.raises(ValueError, match="none left for a validation split"):
        F.split_validation(test, val, 5)


def _state(tmp_path, seed, grid):
    d = tmp_path / f"seed{seed}"
    d.mkdir(parents=True, exist_ok=True)
    st = B.SeedState(d / "state.json")
    st.data["grid"] = grid
    st.save()
    return st


def test_the_setting_is_chosen_from_the_mean_over_every_seeds_grid(tmp_path):
    # seed 0 alone prefers 3e-6; the mean over the three seeds prefers 1e-5 (0.70 vs 0.6667)
    _state(tmp_path, 0, {"lr3e-06_kl0": 0.80, "lr1e-05_kl0": 0.70})
    _state(tmp_path, 1, {"lr3e-06_kl0": 0.60, "lr1e-05_kl0": 0.70})
    _state(tmp_path, 2, {"lr3e-06_kl0": 0.60, "lr1e-05_kl0": 0.70})
    sel = P.pooled_selection(_proto(), tmp_path, wait_min=0)
    assert (sel.lr, sel.kl, sel.seeds) == (1e-5, 0.0, [0, 1, 2])
    assert sel.scores[(3e-6, 0.0)] == pytest.approx(2.0 / 3)


def test_a_seed_that_never_finishes_its_grid_is_left_out_after_the_wait(tmp_path):
    _state(tmp_path, 0, {"lr3e-06_kl0": 0.80, "lr1e-05_kl0": 0.70})
    _state(tmp_path, 1, {"lr3e-06_kl0": 0.10})  # unfinished
    t = time.time()
    sel = P.pooled_selection(_proto(), tmp_path, wait_min=0.001, poll_s=0.01)
    assert time.time() - t < 5 and (sel.lr, sel.seeds) == (3e-6, [0])
    with pytest.raises(RuntimeError, match="no seed finished the grid"):
        P.pooled_selection(_proto(), tmp_path / "none", wait_min=0)


def test_a_seed_stopped_by_its_preflight_is_not_waited_for(tmp_path):
    _state(tmp_path, 0, {"lr3e-06_kl0": 0.80, "lr1e-05_kl0": 0.70})
    st = _state(tmp_path, 1, {})
    st.data["stopped"] = "CVIG cannot act"
    st.save()
    _state(tmp_path, 2, {"lr3e-06_kl0": 0.60, "lr1e-05_kl0": 0.75})
    t = time.time()
    sel = P.pooled_selection(_proto(), tmp_path, wait_min=10, poll_s=0.01)  # would wait 10 min for seed 1
    assert time.time() - t < 5 and sel.seeds == [0, 2] and sel.lr == 1e-5
    with pytest.raises(SystemExit, match=r"seeds \[2\]"):  # an unfinished seed that was not stopped still counts
        _state(tmp_path, 2, {})
        P.pooled_selection(_proto(), tmp_path, wait_min=0, require_all="bench")


def test_seed_state_survives_a_restart(tmp_path):
    st = B.SeedState(tmp_path / "state.json")
    assert st.data == {"grid": {}, "evals": {}, "costs": {}, "minutes": {}, "dropped": {}}
    st.data["evals"]["grpo"] = {"macro": 0.5}
    st.save()
    assert B.SeedState(tmp_path / "state.json").data["evals"] == {"grpo": {"macro": 0.5}}
    assert not (tmp_path / "state.tmp").exists()


def test_an_optional_arm_is_predicted_from_its_reference_arms_step_time():
    state = {"costs": {"bpo": {"median_step_s": 2.0}, "grpo": {"median_step_s": 1.0}}}
    now = time.time()
    end = B.predicted_end(state, "bpo_p8", steps=100)  # 100 x 2.0 s x 3.0 + the evaluation margin
    assert end - now == pytest.approx(600 + 60 * B.EVAL_MARGIN_MIN, abs=2)
    end = B.predicted_end(state, "grpo_g32", steps=100)
    assert end - now == pytest.approx(150 + 60 * B.EVAL_MARGIN_MIN, abs=2)


@pytest.mark.parametrize("diffs,direction,want", [
    ([0.02, 0.03, 0.025], +1, "reproduced"),
    ([-0.02, -0.03, -0.025], +1, "reversed"),
    ([0.05, -0.04, 0.01], +1, "not resolved"),
    ([0.02, float("nan"), float("nan")], +1, "not resolved (fewer than 2 seeds)"),
])
def test_verdict_reads_the_paired_interval(diffs, direction, want):
    assert T.verdict(diffs, direction)[0] == want


def _record(seed, macro, null, extra=()):
    arms = {"sft": 0.78, "coin_flip": 0.70, "grpo": 0.80, "bpo": 0.80 + macro, "tgrpo": 0.81}
    evals = {a: {"macro": v, "temporal": v - 0.1, "abstain_recall": 0.3 + (null if a == "bpo" else 0.0),
                 "abstain_f1": 0.5, "macro_biased": 0.9, "per_qtype": {"direction": v - 0.2}} for a, v in arms.items()}
    return {"seed": seed, "command": f"python bench/bpo_protocol.py --seeds 0 1 2 --only {seed} --rl-steps 3",
            "settings": {"n_train": 64, "n_test": 400, "n_val": 200, "sft_steps": 3, "rl_steps": 3,
                         "prompts_per_step": 2, "lr_grid": [3e-6, 1e-5], "kl_grid": [0.0], "overrides": []},
            "preflight": {}, "grid": {"lr3e-06_kl0": 0.7, "lr1e-05_kl0": 0.75},
            "selection": {"lr": 1e-5, "kl": 0.0, "seeds": [0, 1, 2]}, "evals": evals,
            "costs": {a: {"median_step_s": 1.0} for a in arms}, "minutes": {"preflight": 10.0, "grid_lr1e-05_kl0": 2.0},
            "dropped": {"bpo_p8": "predicted to end at 07:00 UTC, after the deadline 06:00 UTC", **dict(extra)}}


def test_render_from_records_states_each_claim_with_its_interval(tmp_path, monkeypatch):
    monkeypatch.setattr(F, "preflight_section", lambda recs: ["## Pre-flight (stub)", ""])
    d = tmp_path / "rec"
    d.mkdir()
    for s, (m, n) in enumerate([(0.02, 0.10), (0.03, 0.12), (0.025, 0.08)]):
        (d / f"seed{s}.json").write_text(json.dumps(_record(s, m, n)))
    (tmp_path / "notes.md").write_text("BPO moved.\n")
    args = SimpleNamespace(seed_dir=str(d), seeds=[0, 1, 2], report=str(tmp_path / "bpo.md"),
                           notes=str(tmp_path / "notes.md"))
    T.render_main(args, ["--seeds", "0", "1", "2", "--render"])
    text = (tmp_path / "bpo.md").read_text()
    assert "## Reading (written by hand from the tables above, `" in text and "\nBPO moved.\n" in text
    assert "--only $s --rl-steps 3 & done; wait; python bench/bpo_protocol.py --seeds 0 1 2 --render" in text
    assert "**Reduced grid**: lr [3e-06, 1e-05] x KL [0.0]" in text
    assert "| 1e-05 | 75.0 **(chosen)** |" in text and "Chosen: lr 1e-05, KL 0, from the mean over seeds [0, 1, 2]" in text
    claim = next(x for x in text.splitlines() if x.startswith("| BPO beats GRPO on the debiased split"))
    assert "+2.5 [1.3, 3.7]" in claim and "**reproduced**" in claim
    assert "| BPO 8x4 beats GRPO G=32" in text and "not run (bpo_p8 has no seed)" in text
    assert "bpo_p8: not run (seeds 0, 1, 2: predicted to end at 07:00 UTC" in text
    g = next(x for x in text.splitlines() if x.startswith("| control: the true reward beats a coin flip"))
    assert "+10.0" in g and "**reproduced**" in g
    assert "Incomplete" not in text and "SMOKE" not in text


def test_render_labels_a_seed_without_a_record(tmp_path, monkeypatch):
    monkeypatch.setattr(F, "preflight_section", lambda recs: [])
    d = tmp_path / "rec"
    d.mkdir()
    for s in (0, 1):
        (d / f"seed{s}.json").write_text(json.dumps(_record(s, 0.01 * (s + 1), 0.1)))
    args = SimpleNamespace(seed_dir=str(d), seeds=[0, 1, 2], report=str(tmp_path / "bpo.md"))
    T.render_main(args, ["--render"])
    text = (tmp_path / "bpo.md").read_text()
    assert "**Incomplete: no record for seed(s) [2]**" in text
    row = next(x for x in text.splitlines() if x.startswith("| bpo − grpo") and "seeds a > b" not in x)
    assert row.split(" | ")[-2] == "—"  # seed 2's cell


def test_record_only_labels_the_arms_a_stopped_run_did_not_finish(tmp_path):
    sd = tmp_path / "out" / "seed0"
    sd.mkdir(parents=True)
    (sd / "preflight.json").write_text(json.dumps({"macro": 0.8}))
    st = B.SeedState(sd / "state.json")
    st.data["evals"] = {"sft": {"macro": 0.8}, "grpo": {"macro": 0.82}, "coin_flip": {"macro": 0.7}}
    st.data["dropped"] = {"grpo_g32": "predicted to end after the deadline"}
    st.save()
    argv = ["--smoke", "--seeds", "0", "--only", "0", "--n-test", "20", "--out", str(tmp_path / "out"),
            "--seed-dir", str(tmp_path / "rec")]
    B.main(argv + ["--record-only"])
    rec = json.loads((tmp_path / "rec" / "seed0.json").read_text())
    assert rec["command"] == "python bench/bpo_protocol.py " + " ".join(argv)  # the run's command, not this one
    assert set(rec["evals"]) == {"sft", "grpo", "coin_flip"} and rec["preflight"] == {"macro": 0.8}
    assert rec["dropped"]["grpo_g32"] == "predicted to end after the deadline"
    for arm in ("bpo", "tgrpo", "bpo_p8"):
        assert rec["dropped"][arm].startswith("not finished when the run was stopped")


def test_the_preflight_tables_render_from_kept_test_items_without_the_world(tmp_path):
    test = tmp_path / "test.json"
    test.write_text(json.dumps([{"qtype": "color", "candidates": list("abcde")},
                                {"qtype": "count", "candidates": list("abcd")}]))
    items = F.kept_test_items(str(test))
    assert items == [{"qtype": "color", "n_candidates": 5}, {"qtype": "count", "n_candidates": 4}]
    samples = F.record_samples({"test": str(tmp_path / "gone.json"), "test_items": items})
    from _preflight import chance_per_type

    assert chance_per_type(samples) == {"color": 0.2, "count": 0.25}
