"""FastRL at its edges, as tables (specs/algorithms.md §4): the traversal order on batches large enough that an
unstable sort shows, float64 advantage gaps, bounds on both sides, messages, ARS past the horizon, and the
wrapper handing its base the role, the views, the batch and the selection."""
import pytest
import torch

from mmrl.algos.base import AdvantageOutput
from mmrl.algos.fastrl import (ARSState, advantage_partitions, dp_pad, kept_set_sizes, mdap_keep, ngram_set)
from mmrl.algos.spec import ALGORITHMS, AlgorithmSpec, Selection, build_spec, register_algorithm
from mmrl.config import load_config
from mmrl.errors import ConfigError
from tests.algos.test_fastrl_spec import SPEC1, _batch, _fastrl

T = torch.tensor

if "test_fastrl_probe" not in ALGORITHMS:
    @register_algorithm("test_fastrl_probe")
    class Probe(AlgorithmSpec):
        """A base that gives per-token advantages and records what after_step receives."""

        def advantages(self, batch):
            # per token: +1 on the first token, +5 on padding (never read): sequence advantage 1 / length
            t = int(batch.lengths.max())
            adv = torch.full((len(batch), t), 5.0)
            adv[:, 0] = 1.0
            for i, n in enumerate(batch.lengths.tolist()):
                adv[i, 1:n] = 0.0
            return AdvantageOutput(advantages=adv)

        def after_step(self, batch, selection, epoch_ended):
            self.seen = (batch, selection, epoch_ended)
            return {"probe/epoch_ended": float(epoch_ended)}


def test_partitions_follow_group_then_advantage_on_a_large_batch():
    # 3 prompts x 10 rollouts interleaved, advantages 0, 1, 2 ... repeated: one partition per (prompt, value)
    gids = T([i % 3 for i in range(30)])
    adv = T([float((i // 3) % 4) for i in range(30)])
    part = advantage_partitions(adv, gids)
    expect = {}
    for g in range(3):
        for v in sorted({float(a) for a, h in zip(adv.tolist(), gids.tolist()) if h == g}):
            expect[(g, v)] = len(expect)
    assert part.tolist() == [expect[(int(g), float(a))] for a, g in zip(adv, gids)]


def test_the_traversal_keeps_the_first_rollout_of_equal_advantage_on_a_large_batch():
    # 24 identical responses of one prompt and one advantage: only the first (ties by index) is kept
    responses = [T([1, 2, 3])] * 24
    keep = mdap_keep(torch.ones(24), torch.zeros(24, dtype=torch.long), responses)
    assert keep.dtype == torch.bool and keep.tolist() == [True] + [False] * 23
    # the same with |A| ties across two partitions of opposite sign (A = +1 and -1)
    adv = T([1.0 if i % 2 else -1.0 for i in range(24)])
    keep = mdap_keep(adv, torch.zeros(24, dtype=torch.long), responses)
    assert keep.tolist() == [True, True] + [False] * 22


def test_advantage_gaps_are_measured_in_float64():
    # float32 1e-4 is 9.99999975e-05 in float64: below the tolerance, so one partition
    assert advantage_partitions(T([0.0, 1e-4], dtype=torch.float32), T([0, 0])).tolist() == [0, 0]
    assert advantage_partitions(T([0.0, 1e-4], dtype=torch.float64), T([0, 0])).tolist() == [0, 1]


def test_mdap_edges():
    assert ngram_set([1, 2, 1], 1) == frozenset({(1,), (2,)})  # a plain list works too
    # tau 0: nothing is too similar, every rollout is kept
    assert mdap_keep(T([1.0, 1.0]), T([0, 0]), [T([1]), T([1])], tau=0.0).tolist() == [True, True]
    with pytest.raises(ValueError, match=r"^MDAP tau must be >= 0, got -0\.5$"):
        mdap_keep(T([1.0]), T([0]), [T([1])], tau=-0.5)
    with pytest.raises(ValueError, match=r"^eligible has 3 entries, expected 2$"):
        mdap_keep(T([1.0, 1.0]), T([0, 0]), [T([1]), T([2])], eligible=T([True, True, False]))
    # one eligible row is kept
    assert mdap_keep(T([1.0, 0.0]), T([0, 0]), [T([1]), T([2])], eligible=T([False, True])).tolist() == [False, True]
    # the tolerance reaches the partitions: A = 1.0 and 1.3 are equal at tol 0.5, so the similar one goes
    assert mdap_keep(T([1.0, 1.3]), T([0, 0]), [T([1, 2]), T([1, 2])], tol=0.5).tolist() == [False, True]
    assert mdap_keep(T([1.0, 1.3]), T([0, 0]), [T([1, 2]), T([1, 2])]).tolist() == [True, True]


def test_padding_and_sizes_take_integer_masks():
    padded = dp_pad(T([1, 0, 0]), T([1.0, 0.5, 0.2]), T([0, 0, 0]), 2)
    assert padded.dtype == torch.bool and padded.tolist() == [True, True, False]
    assert kept_set_sizes(T([True, True, False]), T([0, 0, 1])) == (1.0, 2.0)
    assert kept_set_sizes(T([True, True, False]), T([0, 0, 1]), eligible=T([1, 0, 0])) == (2.0, 2.0)
    assert kept_set_sizes(T([True, True, False]), T([0, 0, 1]), eligible=T([0, 0, 1])) == (0.0, 0.0)  # prompt 1 only


ARS_BOUNDS = [
    (dict(g_max=2, total_steps=1), None),
    (dict(g_max=1, total_steps=5), r"^ARS needs G = rollout\.n >= 2, got 1$"),
    (dict(g_max=4, total_steps=0), r"^ARS needs total steps >= 1, got 0$"),
]


@pytest.mark.parametrize("kw,error", ARS_BOUNDS, ids=["ok", "g", "steps"])
def test_ars_state_bounds(kw, error):
    if error is None:
        s = ARSState(**kw)
        assert (s.g_max, s.total_steps, s.n) == (kw["g_max"], kw["total_steps"], kw["g_max"])
    else:
        with pytest.raises(ValueError, match=error):
            ARSState(**kw)


def test_ars_epochs_count_and_alpha_stops_at_one_past_the_horizon():
    s = ARSState(g_max=8, total_steps=10)
    s.record(3.0, 5.0)
    first = s.end_epoch(step=4)
    assert first == {"fastrl/ars_g_ref": 4.0, "fastrl/ars_n": 8.0} and s.epochs_done == 1
    s.record(2.0, 4.0)
    # step 15 of 10: alpha stays 1, G'_t = mean = 2 (alpha 1.5 would give 1.0)
    out = s.end_epoch(step=15)
    assert out["fastrl/ars_g_t"] == 2.0 and out["fastrl/ars_g_ref"] == 4.0 and s.n == 6 and s.epochs_done == 2
    assert s.end_epoch(step=16) == {"fastrl/ars_n": 6.0} and s.epochs_done == 3


# ---- the wrapper -------------------------------------------------------------------------------------------------
CONFIG = [  # params, accepted or the message
    ({"tau": 0.0}, None), ({"adv_tol": 0.0}, None), ({"total_steps": 1}, None),
    ({"ngram": 0}, r"^config key 'algorithm\.params\.ngram' must be >= 1, got 0$"),
    ({"adv_tol": -1.0}, r"^config key 'algorithm\.params\.adv_tol' must be >= 0, got -1\.0$"),
]


@pytest.mark.parametrize("params,error", CONFIG, ids=[str(i) for i in range(len(CONFIG))])
def test_fastrl_config_bounds(params, error):
    loss = load_config(None, []).algorithm
    cls = ALGORITHMS.get("fastrl")
    kw = {"base": "grpo", "total_steps": 20, **params}
    if error is None:
        assert cls(kw, loss).loss is loss
    else:
        with pytest.raises(ConfigError, match=error):
            cls(kw, loss)
    with pytest.raises(ConfigError, match=r"^config key 'run\.algo\.ngram'"):
        cls({"base": "grpo", "total_steps": 20, "ngram": 0}, loss, key="run.algo")
    with pytest.raises(ConfigError, match=r"^config key 'run\.algo\.kapa'"):
        cls({"base": "grpo", "total_steps": 20, "kapa": 0}, loss, key="run.algo")


def test_plan_hands_the_base_its_role_and_views():
    assert _fastrl(base="tgrpo", ars=False).plan("shuffled", 8) == 4
    assert _fastrl(base="tgrpo", ars=False).plan("anchor", 8) == 8
    assert _fastrl(base="tgrpo").plan("anchor", 8) == 8
    assert _fastrl(base="bpo", ars=False).plan("anchor", 8, 4) == 2
    assert _fastrl(base="tgrpo").plan("shuffled", 8) == 4  # through ARS (n = 8 at the start)
    spec = _fastrl(ars=False)
    assert spec.plan("anchor", 8) == 8 and spec.ars_state is None
    two = _fastrl()
    assert two.plan("anchor", 2) == 2 and two.ars_state is not None and two.ars_state.g_max == 2
    bpo = _fastrl(base="bpo")
    bpo.plan("anchor", 6, 2)
    bpo.ars_state.n = 5  # ARS count 5 with 2 views: 4 -> 2 per view
    assert bpo.plan("anchor", 6, 2) == 2


def test_select_on_one_row_per_token_advantages_and_missing_ids():
    spec = _fastrl(base="test_fastrl_probe", pad_to=1)
    one = _batch([1.0], [0], [[1, 2]])
    sel = spec.select(one, spec.advantages(one))
    assert sel.train_mask.tolist() == [True] and sel.metrics["fastrl/kept_rows"] == 1.0
    # per-token advantages are reduced over each response's own tokens: 1/2, 1/3 and 1/2 -> rows 0 and 2 share a
    # partition (and a response), so row 2 goes
    b = _batch([1.0, 1.0, 1.0], [0, 0, 0], [[1, 2], [3, 4, 5], [1, 2]])
    assert spec.select(b, spec.advantages(b)).train_mask.tolist() == [True, True, False]
    b.response_ids = b.response_ids[:2]
    with pytest.raises(ValueError, match=r"^FastRL needs the response token ids of every row \(StepBatch\.response_ids\)$"):
        spec.select(b, spec.advantages(b))


def test_select_takes_the_tolerance_and_pads_only_with_rows_the_base_kept():
    b = _batch([1.0, 0.9, 0.0, 1.0, 1.0], [0, 0, 0, 1, 1], [[1, 2], [1, 2], [3], [4], [5]], acc=[1, 1, 0, 1, 1])
    loose = _fastrl(adv_tol=2.0, tau=0.5)  # prompt 0's advantages are one partition: of the two identical responses
    assert loose.select(b, loose.advantages(b)).train_mask[:3].tolist() == [True, False, True]  # the larger |A| stays
    strict = _fastrl(tau=0.5)  # three distinct advantages: nothing is compared
    assert strict.select(b, strict.advantages(b)).train_mask[:3].tolist() == [True, True, True]
    dapo = _fastrl(base="dapo", pad_to=2)  # DAPO drops prompt 1 (all correct); MDAP keeps 3 of prompt 0
    sel = dapo.select(b, dapo.advantages(b))
    # the padding to 4 may only add back a row of prompt 0: none is left, so it stays at 3
    assert sel.train_mask.tolist() == [True, True, True, False, False] and sel.metrics["fastrl/padded_rows"] == 0.0


def test_after_step_passes_the_base_its_arguments_and_waits_for_a_plan():
    spec = _fastrl(base="test_fastrl_probe")
    b = _batch([1.0, 0.0], [0, 0], [[1], [2]])
    assert spec.state_dict() == {"base": {}, "ars": None}
    sel = Selection(train_mask=T([True, True]))
    m = spec.after_step(b, sel, epoch_ended=True)  # no plan yet: no ARS state to update
    assert m == {"probe/epoch_ended": 1.0} and spec.ars_state is None
    assert spec.base.seen[0] is b and spec.base.seen[1] is sel and spec.base.seen[2] is True
    fresh = _fastrl(base="test_fastrl_probe")
    fresh.plan("anchor", 4)  # planned before any step: nothing to record yet
    assert fresh.after_step(b, sel, epoch_ended=False)["fastrl/rollout_n"] == 4.0 and fresh.ars_state.epoch_means == []
    spec.plan("anchor", 4)
    m = spec.after_step(b, sel, epoch_ended=False)  # planned, nothing selected yet: nothing recorded
    assert m == {"probe/epoch_ended": 0.0, "fastrl/rollout_n": 4.0} and spec.ars_state.epoch_means == []
