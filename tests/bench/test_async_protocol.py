"""bench/async_protocol.py and async_protocol_table.py: the claim's reading on hand differences, the step means, each
arm's config, and the results file rendered from hand seed records (no model)."""
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import load_bench


def test_claim_reading_on_hand_intervals():
    t = load_bench("async_protocol_table")
    # [1, 2, 3]: mean 2, sd 1, t(2) = 4.303 -> half width 2.484 -> [-0.48, 4.48]: above -2.5 -> reached
    # wall [-1, -1.2, -0.8]: mean -1, sd 0.2 -> [-1.50, -0.50]: below 0 -> less
    assert t.claim_reading([1, 2, 3], [-1.0, -1.2, -0.8]) == ("reached", "less")
    # [-5, -6, -7]: [-8.48, -3.52], below 0 -> not reached; wall [1, 1.2, 0.8] above 0 -> more
    assert t.claim_reading([-5, -6, -7], [1.0, 1.2, 0.8]) == ("not reached", "more")
    # [-3, 0, 3]: sd 3 -> half 7.45 -> [-7.45, 7.45] crosses both; wall [1, -1, 0.5] crosses 0
    assert t.claim_reading([-3, 0, 3], [1.0, -1.0, 0.5]) == ("not resolved", "not resolved")
    # [0, -1, -2]: mean -1, half 2.484 -> lower end -3.48 < -2.5 and upper 1.48 > 0 -> not resolved
    assert t.claim_reading([0, -1, -2], [-1.0, -1.2, -0.8])[0] == "not resolved"
    assert t.claim_reading([1.0], [-1.0]) == ("not resolved", "not resolved")  # one seed: no interval


def test_step_means_keep_the_mismatch_and_time_keys():
    b = load_bench("async_protocol")
    hist = [{"time/step": 3.0, "mismatch/k3_kl": 0.1, "loss": 5.0, "async/staleness": 0.0},
            {"time/step": 1.0, "mismatch/k3_kl": 0.3, "loss": 1.0, "async/staleness": 1.0},
            {"time/step": 2.0, "mismatch/k3_kl": 0.2, "loss": 2.0, "async/staleness": 1.0, "rollout_corr/ess": 0.9}]
    m = b.step_means(hist)
    assert m["time/step"] == pytest.approx(2.0) and m["time/step@2+"] == pytest.approx(1.5)
    assert m["mismatch/k3_kl"] == pytest.approx(0.2) and m["async/staleness"] == pytest.approx(2 / 3)
    assert m["rollout_corr/ess"] == pytest.approx(0.9)  # a key some steps lack: the mean over those that have it
    assert "loss" not in m and "mismatch/k3_kl@2+" not in m


def test_arm_configs(tmp_path: Path):
    b = load_bench("async_protocol")
    args = SimpleNamespace(rl_steps=7, overrides=[])
    sel = b.Selection(3e-5, 0.01)
    cfgs = {n: b.arm_config(n, tmp_path, args, 1, sel) for n in ("sync", "async1_corr", "async1_nocorr", "coin_flip")}
    assert [cfgs[n].rollout.asynchronous.max_staleness for n in cfgs] == [0, 1, 1, 0]
    modes = [cfgs[n].algorithm.rollout_correction.mode for n in cfgs]
    assert modes[2] == "none" and modes[0] == modes[1] == modes[3] != "none"
    assert [r.name for r in cfgs["coin_flip"].rewards] == ["coin_flip", "format"]
    assert [r.name for r in cfgs["sync"].rewards] == ["accuracy", "format"]
    for c in cfgs.values():
        assert (c.train.lr, c.algorithm.kl_coef, c.train.steps, c.train.seed) == (3e-5, 0.01, 7, 30_001)
    assert cfgs["sync"].train.out_dir.endswith("grid/select_lr3e-05_kl0.01")
    assert cfgs["async1_nocorr"].train.out_dir.endswith("async1_nocorr")


def _record(seed: int, accs, walls):
    arms = ("sft", "coin_flip", "sync", "async1_corr", "async1_nocorr")
    return {"seed": seed, "command": f"python bench/async_protocol.py --seeds 0 1 2 --only {seed} --model tiny",
            "settings": {"n_train": 64, "n_test": 400, "n_val": 32, "sft_steps": 600, "rl_steps": 300,
                         "lr_grid": [1e-4], "kl_grid": [0.0], "model": "tiny", "overrides": []},
            "evals": {a: {"accuracy": x, "per_qtype": {"color": x}} for a, x in zip(arms, accs)},
            "chance": {"color": 0.25},
            "minutes": {f"rl_{a}": w for a, w in zip(arms[1:], walls)},
            "cpu_minutes": {f"rl_{a}": w for a, w in zip(arms[1:], walls)},
            "algo_means": {a: {"mismatch/k3_kl": 0.01 * i, "time/step@2+": 0.5} for i, a in enumerate(arms[1:])},
            "grid": {"lr0.0001_kl0": 0.7}, "selection": {"lr": 1e-4, "kl": 0.0, "seeds": [0, 1, 2]}}


def test_render_from_hand_records():
    t = load_bench("async_protocol_table")
    recs = {s: _record(s, [0.60, 0.60, 0.70 + 0.01 * s, 0.71 + 0.01 * s, 0.69], [2.0, 2.0 + 0.1 * s, 3.0, 3.1])
            for s in (0, 1, 2)}
    import _protocol

    proto = _protocol.Protocol(command="CMD", seeds=[0, 1, 2], n_test=400, n_val=32, lr_grid=[1e-4], kl_grid=[0.0])
    text = t.render_records(recs, proto).render()
    assert text.startswith("# Asynchronous rollouts") and "Command: `CMD`" in text
    assert "The grid is one point (lr 0.0001, KL 0): the setting is fixed" in text
    # sync 70, 71, 72 -> 71.0 [68.5, 73.5] (sd 1, half 2.484)
    assert "| sync | 71.0 [68.5, 73.5] | 70.0 | 71.0 | 72.0 |" in text
    # async1_corr - sync = +1 on every seed: zero spread, interval [1, 1]; wall +1.0, +0.9, +0.8 -> mean +0.9
    assert "| async1_corr − sync | +1.0 [1.0, 1.0] (CI above 0) | +1.0 | +1.0 | +1.0 | 3/3 |" in text
    assert "| async1_corr − sync | +0.9 [0.7, 1.1] (CI above 0) | +1.0 | +0.9 | +0.8 | 3/3 |" in text
    assert "| async-1, correction token_truncate 2 | **reached** | **more** |" in text
    # async1_nocorr - sync = -1, -2, -3 points: [-4.48, 0.48], below -2.5 and across 0 -> not resolved
    assert "| async-1, correction none | **not resolved** | **more** |" in text
    mismatch = text.split("## Sampler/trainer mismatch")[1]
    assert "| sync (max_staleness 0) | 0.01 | — |" in mismatch and "| async-1, correction none | 0.03 | — |" in mismatch
