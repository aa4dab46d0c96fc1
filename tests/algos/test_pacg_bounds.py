"""PACG's parameter bounds, its gate's edges and its wrapper plumbing, as tables (specs/algorithms.md §2).

Every bound is checked on both sides (the value just inside accepted, the one outside refused with the message
that names it); the gate is checked where a comparison's strictness shows (a claim exactly at the quantile, a
group of two claims, a σ exactly at ``eps``, no claim at all).
"""
import math
import re

import pytest
import torch

from mmrl.algos.base import LossParams
from mmrl.algos.pacg import PACG, PACGParams
from mmrl.algos.pacg_gate import claim_scores, efs_tokens, gate_advantages, persistence_gate, span_means
from mmrl.algos.spec import build_spec
from mmrl.errors import ConfigError
from tests.algos.test_pacg_spec import PATCH, TEXTS, make_batch

BOUNDS_MSG = r"^pacg needs 0 < q < 1, 0 <= gamma <= 1, eta >= 0; got q={q}, gamma={gamma}, eta={eta}$"
PARAMS = [  # (q, gamma, eta, accepted)
    (0.5, 0.5, 0.5, True), (0.01, 0.0, 0.0, True), (0.99, 1.0, 2.0, True),
    (0.0, 0.5, 0.5, False), (1.0, 0.5, 0.5, False), (1.5, 0.5, 0.5, False), (-0.1, 0.5, 0.5, False),
    (0.5, -0.1, 0.5, False), (0.5, 1.1, 0.5, False), (0.5, 2.0, 0.5, False), (0.5, 0.5, -0.1, False),
]


@pytest.mark.parametrize("q,gamma,eta,ok", PARAMS, ids=[f"q{q}-g{g}-e{e}" for q, g, e, _ in PARAMS])
def test_pacg_params_bounds_each_checked_alone(q, gamma, eta, ok):
    if ok:
        p = PACGParams(q=q, gamma=gamma, eta=eta)
        assert (p.q, p.gamma, p.eta) == (q, gamma, eta)
    else:
        with pytest.raises(ValueError, match=BOUNDS_MSG.format(q=q, gamma=gamma, eta=eta).replace(".", r"\.")):
            PACGParams(q=q, gamma=gamma, eta=eta)


def test_pacg_params_messages():
    with pytest.raises(ValueError, match=r"^pacg mode must be zscore or quantile, got 'median'$"):
        PACGParams(mode="median")
    with pytest.raises(ValueError, match=r"^pacg has neither a lexicon nor a claim_extractor: no sentence could be a claim$"):
        PACGParams(lexicon=[])


def test_the_wrapper_carries_the_loss_and_names_its_key():
    loss = LossParams(clip_low=0.1)
    spec = PACG({"base": "grpo"}, loss)
    assert spec.loss is loss and spec.base.loss is loss
    with pytest.raises(ConfigError, match=r"config key 'algorithm\.params\.claim_extractor'"):
        PACG({"claim_extractor": "nowhere_module:fn"}, loss)
    with pytest.raises(ConfigError, match=r"config key 'run\.algo\.base\.params\.alpha'"):
        PACG({"base": {"name": "vppo", "params": {"alpha": 0.8}}}, loss, key="run.algo")
    with pytest.raises(ConfigError, match=r"config key 'run\.algo\.claim_extractor'"):
        PACG({"claim_extractor": "nowhere_module:fn"}, loss, key="run.algo")


def test_sentences_that_are_no_claim_are_skipped_without_an_extractor():
    texts = ["<think>Hello there. I see red [0].</think>A", "<think>So it goes.</think>B"]
    out = build_spec("pacg", {"base": "grpo"}, LossParams()).advantages(make_batch(texts, [1.0, 0.0], [0, 0]))
    assert out.metrics["pacg/claims"] == 1.0


# (base intervention, pacg intervention, shared): the pass is shared only when transform and params both match
SHARING = [
    ({}, {}, True),
    ({}, {"intervention_params": {"p": 0.25}}, False),  # same transform, other params
    ({"intervention_params": {"p": 0.25}}, {"intervention_params": {"p": 0.25}}, True),
    ({"intervention": "full_mask"}, {}, False),  # other transform
    ({"intervention": "full_mask", "intervention_params": {"p": 0.5, "patch": 14, "value": 0}}, {}, False),  # same params
    ({"intervention": "full_mask", "intervention_params": {"value": 0}}, {"intervention": "full_mask",
                                                                          "intervention_params": {"value": 0}}, True),
]


@pytest.mark.parametrize("base_iv,pacg_iv,shared", SHARING, ids=[str(i) for i in range(len(SHARING))])
def test_the_rescoring_pass_is_shared_only_for_the_same_intervention(base_iv, pacg_iv, shared):
    spec = build_spec("pacg", {"base": {"name": "vppo", "params": base_iv}, **pacg_iv}, LossParams())
    base_keys = list(build_spec("vppo", base_iv, LossParams()).needs().rescore)
    keys = list(spec.needs().rescore)
    assert (keys == base_keys) == shared and len(keys) == (2 if shared else 3)  # + the unchanged view's (identity)
    assert (spec.rescore_key in base_keys) == shared
    assert spec.needs().rescore[spec.rescore_key] == spec.intervention


def test_missing_inputs_are_named():
    spec = build_spec("pacg", {"base": "grpo"}, LossParams())
    batch = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1])
    batch.rescored = {PATCH: batch.rescored[PATCH][:1]}
    with pytest.raises(ValueError, match=rf"^PACG needs the re-scored log-probs '{re.escape(PATCH)}' of every response "
                                         r"\(got 1 for 4\)$"):
        spec.advantages(batch)
    batch.rescored = {}
    with pytest.raises(ValueError, match=r"\(got 0 for 4\)$"):
        spec.advantages(batch)
    batch.decode = None
    with pytest.raises(ValueError, match=r"^PACG needs StepBatch\.decode \(the tokenizer's decode\) to find the "
                                         r"claims' tokens$"):
        spec.advantages(batch)


def test_one_row_batch_metrics_and_the_bases_train_mask():
    one = build_spec("pacg", {"base": "grpo"}, LossParams()).advantages(make_batch(["<think>I see red [0].</think>A"], [1.0], [0], claim_p=[0.5]))
    assert one.metrics["pacg/responses_with_claims"] == 1.0 and one.metrics["pacg/claims"] == 1.0
    # T-GRPO's advantages carry a train mask (only ordered responses train): PACG passes it through
    spec = build_spec("pacg", {"base": "tgrpo"}, LossParams())
    batch = make_batch(TEXTS, [1.0, 1.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.95, 0.3, 0.25])
    batch.roles = ["anchor", "shuffled", "anchor", "shuffled"]
    out = spec.advantages(batch)
    base = build_spec("tgrpo", {}, LossParams()).advantages(batch)
    assert out.train_mask is not None and torch.equal(out.train_mask, base.train_mask)
    assert torch.equal(out.rewards, base.rewards)


def test_responses_without_tokens_give_zero_token_efs():
    out = build_spec("pacg", {"base": "grpo"}, LossParams()).advantages(make_batch(["", ""], [1.0, 0.0], [0, 0]))
    assert out.metrics["pacg/efs_token_mean"] == 0.0 and out.advantages.shape == (2, 0)


# ---- the gate's pure functions ----------------------------------------------------------------------------------
def test_efs_is_never_negative_where_float32_rounding_would_make_it_so():
    d = torch.linspace(-1e-3, 1e-3, 2001)
    assert float((torch.exp(d) - d - 1).min()) < 0  # the unclamped value dips below 0 in float32
    assert float(efs_tokens(d).min()) == 0.0 and float(efs_tokens(torch.tensor([30.0]))) == 10.0


def test_span_means_edges():
    vals = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 6.0])]
    assert span_means(vals, torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long),
                      torch.tensor([], dtype=torch.long)).shape == (0,)
    assert span_means(vals, torch.tensor([1, 0]), torch.tensor([0, 1]), torch.tensor([2, 3])).tolist() == [5.0, 2.5]
    with pytest.raises(ValueError, match=r"^every claim span needs at least one token$"):
        span_means(vals, torch.tensor([0]), torch.tensor([1]), torch.tensor([1]))  # empty span
    with pytest.raises(ValueError, match=r"^a claim span runs past its response$"):
        span_means(vals, torch.tensor([1]), torch.tensor([0]), torch.tensor([3]))
    with pytest.raises(ValueError, match=r"^1 re-scored responses for 2 responses$"):
        claim_scores(vals[:1], vals, torch.tensor([0]), torch.tensor([0]), torch.tensor([1]))


@pytest.mark.parametrize("q", [0.0, 1.0, 1.5, -0.2])
def test_the_gate_refuses_a_quantile_outside_0_1(q):
    with pytest.raises(ValueError, match=rf"^PACG quantile q must be in \(0, 1\), got {q}$"):
        persistence_gate(torch.tensor([0.1, 0.9]), q=q)


def test_gate_edges():
    with pytest.raises(ValueError, match=r"^1 group ids for 2 claims$"):
        persistence_gate(torch.tensor([0.1, 0.9]), torch.tensor([0]))
    empty = persistence_gate(torch.zeros(0))
    assert [tuple(x.shape) for x in (empty.z, empty.flagged, empty.gain, empty.threshold)] == [(0,)] * 4
    assert empty.flagged.dtype == torch.bool
    # a group of two claims: mean 0.5, unbiased std 0.2 * sqrt(2), z = +-1/sqrt(2)
    two = persistence_gate(torch.tensor([0.3, 0.7]), kappa=0.5)
    assert two.z.tolist() == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], abs=1e-6)
    assert two.flagged.tolist() == [False, True]
    assert two.gain[1].item() == pytest.approx(1 - 0.5 * (1 / math.sqrt(2) - 0.5), abs=1e-6)
    # a σ exactly at eps is too small: nothing is flagged and z is 0
    p = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)  # sigma = sqrt(2 / 2) = 1 exactly
    at = persistence_gate(p, kappa=0.5, eps=1.0)
    assert at.z.tolist() == [0.0, 0.0, 0.0] and at.flagged.tolist() == [False, False, False]
    assert persistence_gate(p, kappa=0.5, eps=0.999).flagged.tolist() == [False, False, True]
    # quantile mode flags P strictly above the (1 - q) quantile: the claim at the 0.75 quantile (0.4) is not
    qg = persistence_gate(torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5], dtype=torch.float64), mode="quantile", q=0.25)
    assert qg.flagged.tolist() == [False, False, False, False, True]


def test_gate_advantages_edges():
    none = gate_advantages(torch.zeros(0), [], torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                           torch.zeros(0, dtype=torch.long), torch.zeros(0))
    assert none.shape == (0, 0)
    with pytest.raises(ValueError, match=r"^3 advantages for 2 responses$"):
        gate_advantages(torch.zeros(3), [1, 2], *(torch.zeros(0, dtype=torch.long),) * 3, torch.zeros(0))


def test_an_empty_batch_gives_empty_advantages_and_zero_metrics():
    out = build_spec("pacg", {"base": "grpo"}, LossParams()).advantages(make_batch([], [], []))
    assert out.advantages.shape == (0, 0)
    assert [out.metrics[k] for k in ("pacg/claims", "pacg/responses_with_claims", "pacg/flagged_frac",
                                     "pacg/persistence_mean", "pacg/efs_claim_mean", "pacg/efs_token_mean",
                                     "pacg/gain_flagged_mean")] == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
