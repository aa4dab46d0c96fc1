"""The ``fastrl`` wrapper spec: MDAP in ``select`` after the base's selection, ARS in ``plan``/``after_step``,
advantages untouched, state saved (specs/algorithms.md §4)."""
import pytest
import torch

from mmrl.algos.spec import StepBatch, build_algorithm, build_spec
from mmrl.config import load_config
from mmrl.errors import ConfigError

T = torch.tensor


def _batch(rewards, gids, responses, acc=None, step=0, world_size=1, target=0):
    rewards = T(rewards, dtype=torch.float32)
    comps = {"accuracy": T(acc if acc is not None else rewards.tolist(), dtype=torch.float32)}
    n = len(responses)
    return StepBatch(rewards=rewards, components=comps, groups={"prompt": T(gids), "pack": torch.zeros(n, dtype=torch.long)},
                     roles=["anchor"] * n, views=["original"] * n, lengths=T([len(r) for r in responses]),
                     response_ids=[T(r) for r in responses], texts=[""] * n, step=step, world_size=world_size,
                     target_groups=target)


def _fastrl(base="grpo", **params):
    return build_spec("fastrl", {"base": base, "total_steps": 20, **params}, load_config(None, []).algorithm)


SPEC1 = [[1, 2, 3, 4], [1, 2, 3, 5], [7, 8], [9, 10]]


def test_select_is_mdap_over_the_base_and_leaves_advantages_alone():
    spec = _fastrl()
    b = _batch([1, 1, 0, 0], [0, 0, 0, 0], SPEC1)  # A = [a, a, b, b]
    out = spec.advantages(b)
    before = out.advantages.clone()
    sel = spec.select(b, out)
    assert sel.train_mask.tolist() == [True, False, True, True]  # spec test 1
    assert torch.equal(out.advantages, before)  # never recomputed after pruning
    assert sel.metrics["fastrl/kept_frac"] == 0.75 and sel.metrics["fastrl/pruned_rows"] == 1.0
    assert sel.metrics["fastrl/b_mean"] == 3.0 and sel.metrics["fastrl/b_max"] == 3.0


def test_padding_uses_the_batch_world_size():
    spec = _fastrl(tau=1.0)
    b = _batch([1, 1, 0, 0, 1, 0], [0, 0, 0, 0, 1, 1], SPEC1 + [[1], [2]], world_size=4)
    sel = spec.select(b, spec.advantages(b))
    # MDAP keeps one per (prompt, A): rows 0, 2, 4, 5 -> 4, divisible by 4; world size 3 adds one back
    assert sel.train_mask.tolist() == [True, False, True, False, True, True]
    b3 = _batch([1, 1, 0, 0, 1, 0], [0, 0, 0, 0, 1, 1], SPEC1 + [[1], [2]], world_size=3)
    sel3 = spec.select(b3, spec.advantages(b3))
    assert int(sel3.train_mask.sum()) == 6 and sel3.metrics["fastrl/padded_rows"] == 2.0


def test_base_selection_comes_first_dapo_filter():
    spec = _fastrl(base={"name": "dapo", "params": {"max_resample_rounds": 2}})
    # prompt 0 mixed, prompt 1 all correct (DAPO drops it), target 2 groups -> one more prompt wanted
    b = _batch([1, 1, 0, 0, 1, 1], [0, 0, 0, 0, 1, 1], SPEC1 + [[1], [2]], target=2)
    sel = spec.select(b, spec.advantages(b))
    assert sel.train_mask.tolist() == [True, False, True, True, False, False]
    assert sel.resample == 1 and sel.metrics["dapo/kept_groups"] == 1.0
    assert sel.metrics["fastrl/b_mean"] == 3.0  # the dropped prompt does not count
    assert spec.max_resample_rounds() == 2


def test_plan_after_step_and_state_dict_follow_ars():
    spec = _fastrl()
    assert spec.plan("anchor", 8) == 8
    b = _batch([1, 1, 0, 0], [0, 0, 0, 0], SPEC1, step=5)  # kept sets of size 3
    b2 = _batch([1, 0, 1, 1, 1], [0, 0, 1, 1, 1], [[1], [2], [3], [3], [3]], step=6)  # sizes 2 and 1: mean 1.5, max 2
    for _ in range(3):
        m = spec.after_step(b, spec.select(b, spec.advantages(b)), epoch_ended=False)
    assert m["fastrl/rollout_n"] == 8.0 and spec.ars_state.g_ref is None
    # the step whose draw starts epoch 2 closes epoch 1 (G'_ref = 3) and counts in epoch 2
    sel = spec.select(b2, spec.advantages(b2))
    assert sel.metrics["fastrl/b_mean"] == 1.5 and sel.metrics["fastrl/b_max"] == 2.0
    spec.after_step(b2, sel, epoch_ended=True)
    assert spec.ars_state.g_ref == 3.0 and spec.plan("anchor", 8) == 8
    spec.after_step(b2, spec.select(b2, spec.advantages(b2)), epoch_ended=False)
    # epoch 2 ends after 10 of 20 steps: α = 0.5, G'_t = 0.5 x 1.5 + 0.5 x 2 = 1.75, n = round(8 - 1.25) = 7
    b.step = 10
    m = spec.after_step(b, spec.select(b, spec.advantages(b)), epoch_ended=True)
    assert m["fastrl/ars_g_t"] == 1.75 and m["fastrl/rollout_n"] == 7.0 and spec.plan("anchor", 8) == 7
    assert spec.ars_state.epoch_means == [3.0]  # the step that opened epoch 3
    other = _fastrl()
    other.load_state_dict(spec.state_dict())
    assert other.plan("anchor", 8) == 7 and other.ars_state.state_dict() == spec.ars_state.state_dict()
    with pytest.raises(ValueError, match="rollout.n"):
        other.plan("anchor", 6)
    assert _fastrl(ars=False).plan("anchor", 8) == 8
    # a view-set base gets the count rounded down to a multiple of the views: BPO, 4 views, ARS 7 -> 4 -> 1 per view
    bpo = _fastrl(base="bpo")
    bpo.plan("anchor", 8, 4)
    bpo.ars_state.n = 7
    assert bpo.plan("anchor", 8, 4) == 1 and bpo.plan("anchor", 8, 1) == 7


def test_config_errors_name_the_key():
    algo = load_config(None, []).algorithm
    with pytest.raises(ConfigError, match="algorithm.params.total_steps"):
        build_spec("fastrl", {"base": "grpo"}, algo)
    with pytest.raises(ConfigError, match="algorithm.params.tau"):
        build_spec("fastrl", {"base": "grpo", "total_steps": 5, "tau": -1}, algo)
    with pytest.raises(ConfigError, match="algorithm.params.nope"):
        build_spec("fastrl", {"base": "grpo", "total_steps": 5, "nope": 1}, algo)
    with pytest.raises(ConfigError, match="algorithm.params.base"):
        build_spec("fastrl", {"base": "no_such_algo", "total_steps": 5}, algo)
    cfg = load_config(None, ["algorithm.name=fastrl", "algorithm.params={base: gspo, total_steps: 5, tau: 0.5}"])
    assert cfg.algorithm.params["tau"] == 0.5


def test_the_horizon_follows_train_steps_unless_set():
    """FastRL's M_total is derived from train.steps (never asked for twice); an explicit value is the override."""
    from mmrl.train.plan import describe_plan

    cfg = load_config(None, ["algorithm.name=fastrl", "train.steps=37"])
    assert cfg.algorithm.params["total_steps"] == 37
    assert build_algorithm(cfg.algorithm, cfg)._ars(8).total_steps == 37
    assert "algorithm.params.total_steps = 37 (follows train.steps unless set)" in describe_plan(cfg)
    cfg = load_config(None, ["algorithm.name=fastrl", "algorithm.params={base: dapo}", "train.steps=37"])
    assert cfg.algorithm.params["total_steps"] == 37
    cfg = load_config(None, ["algorithm.name=fastrl", "algorithm.params.total_steps=100", "train.steps=37"])
    assert cfg.algorithm.params["total_steps"] == 100
    assert "total_steps" not in load_config(None, ["algorithm.name=grpo"]).algorithm.params


def test_drgrpo_normaliser_follows_the_response_budget_unless_set():
    cfg = load_config(None, ["algorithm.name=drgrpo", "algorithm.loss_agg=seq-mean-token-sum-norm",
                             "rollout.max_new_tokens=48"])
    assert cfg.algorithm.max_response_len == 48
    cfg = load_config(None, ["algorithm.loss_agg=seq-mean-token-sum-norm", "algorithm.max_response_len=64"])
    assert cfg.algorithm.max_response_len == 64
    assert load_config(None, []).algorithm.max_response_len is None  # token-mean: no normaliser


def test_per_token_advantages_are_reduced_over_real_tokens():
    from mmrl.algos.fastrl import sequence_advantages

    adv = T([[1.0, 3.0, 9.0], [2.0, 0.0, 0.0]])
    assert sequence_advantages(adv, T([2, 1])).tolist() == [2.0, 2.0]
    assert torch.equal(sequence_advantages(T([1.0, 2.0]), T([1, 1])), T([1.0, 2.0]))


def test_pad_to_overrides_the_rank_count():
    spec = _fastrl(tau=1.0, pad_to=4)
    b = _batch([1, 1, 0, 0, 1, 0, 1], [0, 0, 0, 0, 1, 1, 1], SPEC1 + [[1], [2], [3]], world_size=1)
    assert int(spec.select(b, spec.advantages(b)).train_mask.sum()) == 4  # 4 kept by MDAP: already a multiple of 4
    b.groups["prompt"][-1] = 2  # a third prompt: 5 kept -> padded to 8 (all 7 rows: the padding runs out)
    assert int(spec.select(b, spec.advantages(b)).train_mask.sum()) == 7
    with pytest.raises(ConfigError, match="algorithm.params.pad_to"):
        _fastrl(pad_to=-1)


def test_nothing_selected_by_the_base_is_not_counted_as_pruned():
    spec = _fastrl(base="dapo")
    b = _batch([1, 1, 1, 1], [0, 0, 1, 1], [[1], [2], [3], [4]], target=2)  # every group all-correct: DAPO keeps none
    sel = spec.select(b, spec.advantages(b))
    assert not sel.train_mask.any() and sel.metrics["fastrl/kept_frac"] == 1.0 and sel.metrics["fastrl/pruned_rows"] == 0.0
