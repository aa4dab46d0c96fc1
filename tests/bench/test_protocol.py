"""The miniature protocol's harness (bench/_protocol.py, bench/_preflight.py): the rules it refuses to break, the
RL setting chosen on validation, the coin-flip arm, the pre-flight statistics and the stop, the results file."""
import json
import math
import sys
from pathlib import Path

import pytest

from mmrl.config import Config
from tests.support import BENCH

if str(BENCH) not in sys.path:  # the bench modules import their siblings by name (as the bench scripts do)
    sys.path.insert(0, str(BENCH))
import _preflight as F  # noqa: E402
import _protocol as P  # noqa: E402


def _proto(**kw):
    base = dict(command="python bench/x.py --seeds 0 1 2", seeds=[0, 1, 2], n_test=400, n_val=64)
    return P.Protocol(**{**base, **kw})


@pytest.mark.parametrize("kw,msg", [
    (dict(seeds=[0, 1]), ">= 3 independent seeds"),
    (dict(seeds=[0, 1, 2, 3], small_effect=True), ">= 5 independent seeds"),
    (dict(n_test=399), "standard error of 2.5 points; a miniature needs >= 400"),
    (dict(n_val=0), "validation split"),
    (dict(seeds=[0, 0, 1]), "repeated seeds"),
    (dict(lr_grid=[]), "grids"),
])
def test_the_protocol_refuses_less_than_it_requires(kw, msg):
    with pytest.raises(P.ProtocolError, match=msg):
        _proto(**kw).check()


def test_smoke_is_allowed_and_labelled():
    p = _proto(seeds=[0], n_test=24, smoke=True).check()
    head = "\n".join(p.header("t"))
    assert head.startswith("# t\n\nCommand: `python bench/x.py --seeds 0 1 2`") and "SMOKE RUN" in head
    assert "SMOKE" not in "\n".join(_proto().check().header("t"))


def test_400_items_give_a_standard_error_of_2_5_points():
    assert P.standard_error_points(400) == pytest.approx(2.5)
    assert P.standard_error_points(100, 0.9) == pytest.approx(3.0)


def test_protocol_from_args_puts_the_command_line_first():
    import argparse

    ap = argparse.ArgumentParser()
    P.add_protocol_args(ap)
    argv = ["--seeds", "3", "4", "5", "--n-test", "480"]
    p = P.protocol_from_args(ap.parse_args(argv), "bench/demo.py", argv)
    assert p.command == "python bench/demo.py --seeds 3 4 5 --n-test 480" and p.seeds == [3, 4, 5]
    with pytest.raises(P.ProtocolError):
        P.protocol_from_args(ap.parse_args(["--n-test", "64"]), "bench/demo.py", [])


def test_seeds_are_independent_worlds_sft_checkpoints_and_rl_runs():
    plans = [P.seed_plan(s) for s in range(5)]
    for attr in ("world_seed", "sft_seed", "rl_seed"):
        assert len({getattr(p, attr) for p in plans}) == 5
    streams = {p.world_seed for p in plans} | {p.sft_seed for p in plans} | {p.rl_seed for p in plans}
    assert len(streams) == 15


def test_the_rl_setting_is_the_best_on_validation_ties_to_the_smaller_lr():
    proto = _proto(lr_grid=[1e-6, 1e-5, 1e-4], kl_grid=[0.0, 0.01])
    table = {(1e-6, 0.0): 0.50, (1e-6, 0.01): 0.52, (1e-5, 0.0): 0.60, (1e-5, 0.01): 0.58, (1e-4, 0.0): 0.60,
             (1e-4, 0.01): 0.30}
    calls = []
    sel = P.select_setting(proto, lambda lr, kl: calls.append((lr, kl)) or table[(lr, kl)])
    assert (sel.lr, sel.kl) == (1e-5, 0.0) and len(calls) == 6  # 1e-4 ties at 0.60: the smaller lr wins
    cfg = P.apply_setting(Config(), sel)
    assert (cfg.train.lr, cfg.algorithm.kl_coef) == (1e-5, 0.0)
    text = "\n".join(P.setting_lines(sel))
    assert "| 1e-05 | 60.0 **(chosen)** | 58.0 |" in text



def test_pooled_selection_with_the_benchs_own_grid_files_can_require_every_seed():
    proto = _proto(lr_grid=[1e-6, 1e-5], kl_grid=[0.0])
    files = {0: {"1e-06,0": 0.8, "1e-05,0": 0.7, "_select_steps": 10}, 1: {"1e-06,0": 0.6, "1e-05,0": 0.7},
             2: {"1e-06,0": 0.6}}  # seed 2 has not finished
    own = dict(grid_of=lambda s: files.get(s, {}), key=lambda lr, kl: f"{lr:g},{kl:g}")
    with pytest.raises(SystemExit, match=r"^tools bench: seeds \[2\] have not finished their selection grid after "
                                         r"0.001 min \(run them with --only S\)$"):
        P.pooled_selection(proto, Path("unused"), 0.001, poll_s=0.01, require_all="tools bench", **own)
    assert P.pooled_selection(proto, Path("unused"), 0.001, poll_s=0.01, **own).seeds == [0, 1]  # goes on without 2
    files[2]["1e-05,0"] = 0.7
    sel = P.pooled_selection(proto, Path("unused"), 0, require_all="tools bench", **own)
    assert (sel.lr, sel.seeds) == (1e-5, [0, 1, 2]) and sel.scores[(1e-6, 0.0)] == pytest.approx(2.0 / 3)


def test_seed_process_args_keep_the_benchs_own_between_render_and_deadline(tmp_path):
    import argparse

    ap = argparse.ArgumentParser()
    P.add_seed_process_args(ap, "x", lambda p: p.add_argument("--steps", type=int, default=3), wait_min=30.0,
                            record_only="write the record")
    assert [a.dest for a in ap._actions[1:]] == ["only", "render", "steps", "deadline", "wait_min", "out", "seed_dir",
                                                 "report", "record_only", "notes", "overrides"]
    args = ap.parse_args(["--only", "1", "a=1"])
    assert (args.only, args.steps, args.wait_min, args.out, args.seed_dir, args.report, args.overrides) == (
        1, 3, 30.0, "runs/x_protocol", "bench/results/x_protocol", "docs/results/x.md", ["a=1"])
    rec = P.write_seed_record(tmp_path / "recs", 1, {"seed": 1, "v": [0.5]})
    assert (tmp_path / "recs" / "seed1.json").read_text() == '{"seed":1,"v":[0.5]}\n' and rec["v"] == [0.5]

def test_the_coin_flip_arm_replaces_accuracy_only():
    cfg = Config()
    coin = P.coin_flip_config(cfg)
    assert [(r.name, r.weight) for r in coin.rewards] == [("coin_flip", 1.0), ("format", 0.1)]
    assert [r.name for r in cfg.rewards] == ["accuracy", "format"]  # the original is untouched
    cfg.rewards = cfg.rewards[1:]
    with pytest.raises(P.ProtocolError, match="has none"):
        P.coin_flip_config(cfg)


def test_the_coin_flip_arm_of_the_stream_reward_set_replaces_its_outcome_reward():
    from mmrl.config import load_config
    from mmrl.rewards import REWARDS

    root = Path(__file__).resolve().parents[2]
    for files in (["configs/stream_gdpo.yaml"], ["configs/stream_gdpo.yaml", "configs/stream_grpo_sum.yaml"]):
        cfg = load_config([str(root / f) for f in files], [])
        cfg.rewards[0].params = {"weights": {"tool": 2.0}}
        coin = P.coin_flip_config(cfg)
        assert [(r.name, r.weight, r.params) for r in coin.rewards] == [
            ("stream_coin_flip", 1.0, {"weights": {"tool": 2.0}})]
        assert [r.name for r in cfg.rewards] == ["stream"]  # the original is untouched
        assert REWARDS.get("stream_coin_flip") is not None
    cfg = Config()  # both present: accuracy is the one replaced (the earlier benches' control)
    cfg.rewards[1].name = "stream"
    assert [r.name for r in P.coin_flip_config(cfg).rewards] == ["coin_flip", "stream"]


def test_the_coin_flip_arm_of_dspo_replaces_dspo_accuracy():
    from mmrl.config import load_config

    cfg = load_config([str(Path(__file__).resolve().parents[2] / "configs" / "dspo_mood.yaml")], [])
    coin = P.coin_flip_config(cfg)
    assert [r.name for r in coin.rewards] == ["dspo_coin_flip"] + [r.name for r in cfg.rewards][1:]
    assert cfg.rewards[0].name == "dspo_accuracy"  # the original is untouched


def test_results_need_the_sft_start_and_the_coin_flip_arm_and_give_cis_and_pairs(tmp_path):
    r = P.Results(_proto(), "Bench")
    vals = {"sft": {0: 0.5, 1: 0.6, 2: 0.7}, "coin_flip": {0: 0.5, 1: 0.55, 2: 0.6}, "grpo": {0: 0.6, 1: 0.7, 2: 0.8}}
    with pytest.raises(P.ProtocolError, match="'coin_flip'"):
        r.arms_table("acc", {"sft": vals["sft"], "grpo": vals["grpo"]})
    lines = r.arms_table("acc", {"sft": vals["sft"], "grpo": vals["grpo"]}, missing={"coin_flip": "no accuracy"})
    assert "coin_flip: not run (no accuracy)" in "\n".join(lines)
    r.add(r.arms_table("acc", vals))
    r.add(r.paired_table("acc", vals, [("grpo", "sft"), ("coin_flip", "sft")]))
    text = r.write(tmp_path / "res.md").read_text()
    assert text.startswith("# Bench\n\nCommand: `python bench/x.py --seeds 0 1 2`")
    # mean 60.0, s = 10, t(0.975, 2) = 4.303: half-width 24.8
    assert "| sft | 60.0 [35.2, 84.8] | 50.0 | 60.0 | 70.0 |" in text
    assert "| grpo − sft | +10.0 [10.0, 10.0] (CI above 0) | +10.0 | +10.0 | +10.0 | 3/3 |" in text
    assert "| coin_flip − sft | -5.0 [-17.4, 7.4] | +0.0 | -5.0 | -10.0 | 0/3 |" in text


@pytest.mark.parametrize("n,c,k,want", [(4, 1, 1, 0.25), (4, 1, 4, 1.0), (4, 0, 2, 0.0), (8, 2, 4, 1 - 15 / 70),
                                        (8, 8, 1, 1.0), (5, 3, 3, 1.0)])
def test_pass_at_k_hand_values(n, c, k, want):
    assert F.pass_at_k(n, c, k) == pytest.approx(want)


def test_pass_at_k_rejects_k_beyond_n():
    with pytest.raises(ValueError):
        F.pass_at_k(4, 1, 5)


def test_zero_spread_share():
    assert F.zero_spread_share([[1, 1, 1], [0, 1, 0], [0, 0], [0.5, 0.5]]) == 0.75
    assert math.isnan(F.zero_spread_share([]))


class _S:
    def __init__(self, q, k):
        self.qtype, self.candidates, self.is_choice = q, ["x"] * k, True


def _groups(rewards):
    return F.Groups(rewards=rewards, correct=[[float(x >= 1) for x in g] for g in rewards], qtypes=["a"] * len(rewards))


def test_preflight_start_vs_chance_pass_at_k_and_a_mechanism_that_can_act():
    samples = [_S("color", 4)] * 100 + [_S("order", 2)] * 100
    mech = F.Mechanism("bonus", lambda ctx: {"bonus_differs": 0.4, "groups": len(ctx["groups"].rewards)},
                       lambda st: (st["bonus_differs"] > 0.1, "the bonus never differs within a group"))
    pf = F.build_preflight(0, {"color": 0.9, "order": 0.55}, samples, _groups([[1, 0, 0, 0], [1, 1, 1, 1]]),
                           ks=(1, 4), mechanism=mech)
    assert pf.per_type["color"] == {"acc": 0.9, "chance": 0.25, "n": 100, "above_chance": 1.0}
    assert pf.per_type["order"]["above_chance"] == 0.0  # 0.55 < 0.5 + 2 * 0.05
    assert pf.pass_at == {1: pytest.approx(0.625), 4: 1.0} and pf.zero_spread == 0.5
    assert pf.can_act and pf.mechanism == {"bonus_differs": 0.4, "groups": 2}
    text = "\n".join(F.preflight_lines([pf], "T-GRPO"))
    assert "| 0 | 90.0 vs 25.0 | 55.0 vs 50.0 (<= chance) |" in text and "| 0 | 2 x 4 | 62.5 | 100.0 | 50.0% |" in text


def test_a_method_that_cannot_act_stops_and_writes_why(tmp_path):
    mech = F.Mechanism("sim", lambda ctx: {"theta_max": 0.46}, lambda st: (st["theta_max"] >= 0.8, "θ <= 0.46 < τ 0.8"))
    pfs = [F.build_preflight(s, {"a": 0.5}, [_S("a", 2)] * 10, _groups([[1, 0]]), ks=(1,), mechanism=mech)
           for s in (0, 1, 2)]
    res = P.Results(_proto(), "MDAP")
    assert F.stop_if_cannot_act(pfs, res, tmp_path / "r.md", "MDAP")
    text = (tmp_path / "r.md").read_text()
    assert text.startswith("# MDAP\n\nCommand:") and "## Stopped before RL" in text
    assert "- seed 1: θ <= 0.46 < τ 0.8" in text and "no RL was spent" in text


def test_all_zero_spread_groups_cannot_act_and_a_good_preflight_goes_on(tmp_path):
    pf = F.build_preflight(0, {"a": 0.9}, [_S("a", 2)] * 10, _groups([[1, 1], [0, 0]]), ks=(1,))
    assert not pf.can_act and "zero reward spread" in pf.reason
    ok = F.build_preflight(0, {"a": 0.9}, [_S("a", 2)] * 10, _groups([[1, 0], [0, 0]]), ks=(1,))
    res = P.Results(_proto(), "B")
    assert not F.stop_if_cannot_act([ok], res, tmp_path / "r.md") and not (tmp_path / "r.md").exists()
    assert "Pre-flight" in res.render()


def test_sample_groups_on_the_real_trainer_restores_the_rng_and_feeds_the_preflight(tiny_model_path, image_world,
                                                                                     tmp_path):
    from mmrl.config import load_config
    from mmrl.train.checkpoint import rng_state
    from mmrl.train.rl_trainer import RLTrainer
    from tests.support import small_overrides

    cfg = load_config([], small_overrides(image_world, tmp_path / "rl", tiny_model_path))
    trainer = RLTrainer(P.coin_flip_config(cfg), quiet=True)
    before = rng_state()
    groups = F.sample_groups(trainer, trainer.samples[:3])
    after = rng_state()
    assert all(torch_equal(before[k], after[k]) for k in before)  # the arm's own stream is untouched
    assert len(groups.rewards) == 3 and all(len(g) == 4 for g in groups.rewards)
    assert all(x in (0.0, 1.0) for g in groups.correct for x in g)  # the true accuracy, logged by coin_flip
    pf = F.build_preflight(0, {s.qtype: 0.0 for s in trainer.samples[:3]}, trainer.samples[:3], groups, ks=(1, 4))
    assert pf.n_groups == 3 and pf.group_size == 4 and set(pf.pass_at) == {1, 4}


def torch_equal(a, b):
    import torch

    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(torch_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(torch_equal(a[k], b[k]) for k in a)
    try:
        import numpy as np

        if isinstance(a, np.ndarray):
            return np.array_equal(a, b)
    except ImportError:
        pass
    return a == b


def test_arm_val_score_runs_the_grid_on_the_validation_file(tiny_model_path, image_world, tmp_path):
    from mmrl.config import load_config
    from tests.support import small_overrides

    cfg = load_config([], small_overrides(image_world, tmp_path / "rl", tiny_model_path) + ["train.eval_limit=4"])
    val = str(image_world / "train.json")  # a file other than data.test
    score = P.arm_val_score({0: cfg}, steps=1, val_paths={0: val}, keep=True)
    sel = P.select_setting(_proto(lr_grid=[1e-5, 1e-3], kl_grid=[0.0]), score)
    assert set(sel.scores) == {(1e-5, 0.0), (1e-3, 0.0)} and all(0.0 <= v <= 1.0 for v in sel.scores.values())
    for lr in ("1e-05", "0.001"):
        preds = list((tmp_path / "rl" / f"select_lr{lr}_kl0" / "predictions").glob("*.jsonl"))
        ids = {json.loads(x)["id"] for p in preds for x in p.read_text().splitlines()}
        assert ids and ids <= {s["id"] for s in json.loads(Path(val).read_text())}  # scored on validation only
        run = tmp_path / "rl" / f"select_lr{lr}_kl0"  # keep: the run's step metrics and its model
        assert len(json.loads((run / "history.json").read_text())) == 1 and (run / "final" / "config.json").exists()


def test_arm_val_score_takes_the_benchs_own_validation_score(tiny_model_path, image_world, tmp_path):
    from mmrl.config import load_config
    from tests.support import small_overrides

    cfg = load_config([], small_overrides(image_world, tmp_path / "rl", tiny_model_path))
    val = str(image_world / "train.json")
    seen = []
    score = P.arm_val_score({0: cfg}, steps=1, val_paths={0: val},
                            evaluate=lambda tr: seen.append((tr.step, tr.cfg.data.test)) or {"eval/accuracy": 0.25})
    assert score(1e-5, 0.0) == 0.25 and seen == [(1, val)]  # after the steps, on the validation file


def test_an_arm_past_the_deadline_is_dropped_with_its_reason_and_forgotten_when_it_fits(tmp_path):
    import time

    assert P.deadline_epoch(None) == math.inf
    assert time.gmtime(P.deadline_epoch("06:00"))[3:5] == (6, 0)
    st, said = P.SeedState(tmp_path / "state.json"), []
    late = P.deadline_epoch("06:00") + 60
    assert P.dropped_by_deadline(st, ["a", "b"], late, "06:00", said.append)
    assert P.SeedState(tmp_path / "state.json").data["dropped"]["b"] == (
        "predicted to end at 06:01 UTC, after the deadline 06:00 UTC")  # saved
    assert said == ["a, b dropped: predicted to end at 06:01 UTC, after the deadline 06:00 UTC"]
    assert not P.dropped_by_deadline(st, ["a"], late - 120, "06:00") and "a" not in st.data["dropped"]
    assert not P.dropped_by_deadline(st, ["b"], late + 1e6, None) and st.data["dropped"] == {}  # no deadline


def test_the_clock_records_wall_and_cpu_minutes_of_a_stage(tmp_path):
    st = P.SeedState(tmp_path / "state.json")
    with P.Clock(st, "stage"):
        sum(i * i for i in range(200_000))
    assert st.data["minutes"]["stage"] > 0 and st.data["cpu_minutes"]["stage"] > 0


def test_grid_todo_skips_finished_points_and_seed_selection_is_kept_for_a_rerun(tmp_path):
    proto = _proto(lr_grid=[1e-5, 3e-5], kl_grid=[0.0])
    st = P.SeedState(tmp_path / "seed0" / "state.json")
    (tmp_path / "seed0").mkdir()
    st.data["grid"] = {"lr1e-05_kl0": 0.5, "lr3e-05_kl0": 0.7}
    (tmp_path / "grid" / "select_lr1e-05_kl0" / "final").mkdir(parents=True)  # 3e-5 has a score but no model
    assert P.grid_todo(st, proto, tmp_path / "grid") == [(3e-5, 0.0, "lr3e-05_kl0")]
    st.save()
    one = _proto(seeds=[0], lr_grid=[1e-5, 3e-5], kl_grid=[0.0])
    sel = P.seed_selection(st, one, tmp_path, wait_min=0)
    assert (sel.lr, sel.kl) == (3e-5, 0.0) and st.data["selection"]["seeds"] == [0] and "wait" in st.data["minutes"]
    st.data["grid"]["lr1e-05_kl0"] = 0.9  # a rerun keeps the recorded choice
    assert P.seed_selection(st, one, tmp_path, wait_min=0).lr == 3e-5


def test_a_seed_added_later_pools_with_the_committed_records_of_the_earlier_seeds(tmp_path):
    proto = _proto(seeds=[0, 1, 2], lr_grid=[1e-5, 3e-5], kl_grid=[0.0])
    recs, out = tmp_path / "records", tmp_path / "runs"
    P.write_seed_record(recs, 0, {"seed": 0, "grid": {"lr1e-05_kl0": 0.5, "lr3e-05_kl0": 0.9}, "stopped": False})
    P.write_seed_record(recs, 1, {"seed": 1, "grid": {}, "stopped": True})  # its pre-flight stopped it: no grid
    (out / "seed2").mkdir(parents=True)  # the new seed: a run state; it prefers 1e-5 a little
    (out / "seed2" / "state.json").write_text('{"grid": {"lr1e-05_kl0": 0.7, "lr3e-05_kl0": 0.6}}')
    sel = P.pooled_selection(proto, out, 0, seed_dir=recs)
    assert (sel.lr, sel.seeds) == (3e-5, [0, 2]) and sel.scores[(3e-5, 0.0)] == pytest.approx(0.75)
    assert P.pooled_selection(proto, out, 0).seeds == [2]  # without the records: only the seed with a run state


def _seed_arms(st, evaluated):
    """``SeedArms`` of seed 0, 10 steps, whose evaluation records its arguments (no model)."""
    return P.SeedArms(0, st, 10, config=lambda n: f"cfg {n}",
                      evaluate=lambda n, path, cfg: evaluated.append(n) or {"acc": 0.5, "path": path, "cfg": cfg},
                      algo_means=lambda h: {"steps": len(h)}, done=lambda e: f"acc {e['acc']}")


def test_seed_arms_adopt_the_grid_run_once_then_skip_finished_arms_and_drop_those_past_the_deadline(
        tmp_path, monkeypatch, capsys):
    import time

    st, evaluated = P.SeedState(tmp_path / "state.json"), []
    st.data["algo_means"] = {}
    run_dir = tmp_path / "grid" / "select_lr1e-05_kl0"
    run_dir.mkdir(parents=True)
    (run_dir / "history.json").write_text(json.dumps([{"time/step": 2.0}, {"time/step": 4.0}]))
    arms = _seed_arms(st, evaluated)
    arms.adopt("ref", run_dir, "cfg0")
    arms.adopt("ref", run_dir, "cfg0")  # already evaluated: nothing again
    assert evaluated == ["ref"] and st.data["costs"]["ref"]["median_step_s"] == 3.0
    assert st.data["evals"]["ref"] == {"acc": 0.5, "path": str(run_dir / "final"), "cfg": "cfg0"}
    assert st.data["algo_means"]["ref"] == {"steps": 2} and "eval_ref" in st.data["cpu_minutes"]
    ran = []
    arms.run = lambda n: ran.append(n) or st.data["evals"].__setitem__(n, {"acc": 1.0})
    st.data["evals"]["done_before"] = {"acc": 0.9}
    st.data["dropped"]["fits"] = "an earlier run's deadline"
    # ends: now + 10 steps x 3 s x ratio + 60 s: 'fits' at +90 s, 'late' at +3060 s, after the deadline at +1800 s
    monkeypatch.setattr(P, "deadline_epoch", lambda hhmm: time.time() + 1800)
    arms.run_later(["fits", "done_before", "late"], "ref", {"fits": 1.0, "done_before": 1.0, "late": 100.0}, 1.0,
                   "12:00")
    assert ran == ["fits"] and "fits" not in st.data["dropped"]
    assert st.data["dropped"]["late"].endswith("after the deadline 12:00 UTC") and "late" not in st.data["evals"]
    assert P.SeedState(tmp_path / "state.json").data["dropped"]["late"] == st.data["dropped"]["late"]  # saved
    err = capsys.readouterr().err
    assert "[seed 0] fits done: acc 1.0" in err and "[seed 0] late dropped: predicted to end at" in err


def test_seed_arms_run_trains_costs_and_evaluates_an_arm(tmp_path, monkeypatch):
    import _arms

    class FakeArm:  # an arm's steps and export, without a model
        def __init__(self, name, cfg):
            self.name, self.cfg, self.history = name, cfg, []

        def step(self):
            self.history.append({"time/step": 1.0 + len(self.history), "reward/total": 0.5})
            return self.history[-1]

        def finish(self):
            return f"{self.name}/final"

    monkeypatch.setattr(_arms, "Arm", FakeArm)
    st, evaluated = P.SeedState(tmp_path / "state.json"), []
    st.data["algo_means"] = {}
    _seed_arms(st, evaluated).run("b")
    saved = P.SeedState(tmp_path / "state.json").data
    assert saved["evals"]["b"] == {"acc": 0.5, "path": "b/final", "cfg": "cfg b"} and saved["algo_means"]["b"] == {
        "steps": 10}
    assert saved["costs"]["b"]["median_step_s"] == 5.5 and saved["costs"]["b"]["cpu_step_s"] >= 0
    assert {"rl_b", "eval_b"} <= set(saved["minutes"]) and {"rl_b", "eval_b"} <= set(saved["cpu_minutes"])


def test_seed_preflight_reuses_a_record_and_a_smoke_run_goes_on(tmp_path):
    st, notes = P.SeedState(tmp_path / "state.json"), []
    rec = P.seed_preflight(0, tmp_path, st, lambda: {"cut": True}, lambda r: ["cut"] if r["cut"] else [], smoke=False)
    assert rec == {"cut": True} and st.data["stopped"] == "cut" and "preflight" in st.data["minutes"]
    (tmp_path / "preflight.json").write_text('{"cut": false}')
    rec = P.seed_preflight(0, tmp_path, st, lambda: 1 / 0, lambda r: ["cut"] if r["cut"] else [], smoke=False)
    assert rec == {"cut": False} and st.data["stopped"] == ""  # reused: run() is not called
    (tmp_path / "preflight.json").write_text('{"cut": true}')
    P.seed_preflight(0, tmp_path, st, lambda: 1 / 0, lambda r: ["cut", "gate"], smoke=True, note=notes.append)
    assert st.data["stopped"] == "" and st.data["smoke_would_stop"] == "cut; gate" and notes == ["cut", "gate"]


@pytest.mark.parametrize("stopped,until,stages", [("cannot act", "arms", ["preflight"]), ("", "preflight", ["preflight"]),
                                                  ("", "grid", ["preflight", "grid"]),
                                                  ("", "arms", ["preflight", "grid", "arms 1e-05"])])
def test_seed_process_stops_where_the_preflight_or_until_says(tmp_path, stopped, until, stages):
    from types import SimpleNamespace

    args = SimpleNamespace(out=str(tmp_path), until=until, wait_min=0, seed_dir=str(tmp_path / "records"))
    ran = []

    def preflight(sd, st):
        ran.append("preflight")
        st.data["stopped"] = stopped
        return {"pf": 1}

    def grid(sd, st, rec):
        ran.append("grid")
        st.data["grid"]["lr1e-05_kl0"] = 0.5
        st.save()

    out = P.seed_process(0, args, _proto(seeds=[0], lr_grid=[1e-5], kl_grid=[0.0]), preflight, grid,
                         lambda sd, st, sel: ran.append(f"arms {sel.lr:g}"), lambda rec, state: dict(state, rec=rec))
    assert ran == stages and out["rec"] == {"pf": 1} and out["algo_means"] == {}
    assert ("this_run" in out["minutes"]) == (len(stages) == 3)  # the process's own minutes: only after the arms


def test_seed_main_renders_or_runs_the_only_seed_unless_something_runs_instead(tmp_path, capsys):
    import argparse

    ap = argparse.ArgumentParser()
    P.add_protocol_args(ap)
    P.add_seed_process_args(ap, "x", lambda a: None)
    base, ran = ["--smoke", "--seeds", "0", "1", "--seed-dir", str(tmp_path)], []

    def run(seed, args, proto):
        ran.append((seed, proto.seeds))
        return {"evals": {"sft": {}, "a": {}}}

    assert P.seed_main(base + ["--render"], ap, "bench/x.py", lambda args, argv: argv[-1], run) == "--render"
    with pytest.raises(SystemExit, match="give --only S"):
        P.seed_main(base + ["--only", "2"], ap, "bench/x.py", print, run)
    P.seed_main(base + ["--only", "1"], ap, "bench/x.py", print, run, instead=lambda args: True)
    assert ran == []
    P.seed_main(base + ["--only", "1"], ap, "bench/x.py", print, run)
    assert ran == [(1, [0, 1])]
    assert f"[seed 1] record written: {tmp_path / 'seed1.json'} (evals: sft, a)" in capsys.readouterr().err


def test_seeds_added_later_say_their_command_and_the_pool_they_chose_from():
    from bpo_protocol_table import command_text

    recs = {s: {"command": f"python b.py --seeds 0 1 --only {s} --x 1", "grid": {"lr1e-05_kl0": 0.5},
                "selection": {"lr": 1e-5, "kl": 0.0, "seeds": [0, 1]}} for s in (0, 1)}
    recs[2] = {"command": "python b.py --seeds 0 1 2 --only 2 --x 1", "grid": {"lr1e-05_kl0": 0.8},
               "selection": {"lr": 1e-5, "kl": 0.0, "seeds": [0, 1, 2]}}
    assert command_text(recs, "R") == ("for s in 0 1; do OMP_NUM_THREADS=1 python b.py --seeds 0 1 --only $s --x 1 & "
                                       "done; wait; for s in 2; do OMP_NUM_THREADS=1 python b.py --seeds 0 1 2 --only $s "
                                       "--x 1 & done; wait; R")
    assert command_text({0: recs[0]}, "R", prefix="N", parallel=False) == (
        "for s in 0; do N python b.py --seeds 0 1 --only $s --x 1; done; R")  # seeds one after the other
    results = P.Results(_proto(seeds=[0, 1, 2], lr_grid=[1e-5], kl_grid=[0.0]), "t")
    text = "\n".join(results.chosen_setting(recs, "(b)"))
    assert "| 1e-05 | 60.0 **(chosen)** |" in text  # the grid's mean over all three seeds
    assert ("Chosen: lr 1e-05, KL 0, seeds 0, 1 from the mean over seeds [0, 1], seeds 2 from the mean over seeds "
            "[0, 1, 2] (b); the same for every arm and seed.") in text
    recs[2]["selection"]["lr"] = 3e-5
    assert "Chosen, NOT the same for every seed: " in "\n".join(results.chosen_setting(recs, "(b)"))
