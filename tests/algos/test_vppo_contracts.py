"""VPPO's bounds, TAS and TGF at their edges, and the spec's plumbing, as tables (specs/algorithms.md, VPPO).

TAS (per response): ``n = (S̄ - min) / (max - min)``, ``α_max = α_min + (1 - α_min) / (mean n + eps)``,
scale ``α_min + n (α_max - α_min)``; no shaping with fewer than two valid responses or a spread of at most 1e-6.
TGF: the top ``⌈k |o_i|⌉`` tokens of each response by S_t, ties to the earlier token.
"""
import math
import re

import pytest
import torch

from mmrl.algos.base import LossParams
from mmrl.algos.spec import build_spec
from mmrl.algos.vppo import ORIGINAL_KEY, VPPOParams
from mmrl.algos.vppo_core import padded, tas_scales, tgf_mask, vppo_token_advantages
from tests.algos.test_pacg_spec import PATCH, TEXTS, make_batch

VPPO_PARAMS = [  # (alpha_min, top_k_ratio, error or None)
    (0.0, 1.0, None), (1.0, 0.01, None),
    (-0.1, 0.4, r"^alpha_min must be in \[0, 1\], got -0\.1$"), (1.1, 0.4, r"^alpha_min must be in \[0, 1\], got 1\.1$"),
    (1.5, 0.4, r"^alpha_min must be in \[0, 1\], got 1\.5$"),
    (0.9, 0.0, r"^top_k_ratio must be in \(0, 1\], got 0\.0$"), (0.9, 1.5, r"^top_k_ratio must be in \(0, 1\], got 1\.5$"),
]


@pytest.mark.parametrize("alpha_min,k,error", VPPO_PARAMS, ids=[str(i) for i in range(len(VPPO_PARAMS))])
def test_vppo_params_bounds(alpha_min, k, error):
    if error is None:
        p = VPPOParams(alpha_min=alpha_min, top_k_ratio=k)
        assert (p.alpha_min, p.top_k_ratio) == (alpha_min, k)
    else:
        with pytest.raises(ValueError, match=error):
            VPPOParams(alpha_min=alpha_min, top_k_ratio=k)


def _tas(scores, alpha_min, eps=1e-8):
    lo, hi = min(scores), max(scores)
    n = [(s - lo) / (hi - lo) for s in scores]
    a_max = alpha_min + (1 - alpha_min) / (sum(n) / len(n) + eps)
    return [alpha_min + x * (a_max - alpha_min) for x in n]


TAS = [  # (scores, valid, alpha_min, eps, expected scales)
    ([1.0, 1.5, 3.0], [True] * 3, 0.9, 1e-8, _tas([1.0, 1.5, 3.0], 0.9)),  # min 1: n = [0, 0.25, 1]
    ([1.0, 1.5, 3.0], [True] * 3, 0.5, 0.5, _tas([1.0, 1.5, 3.0], 0.5, 0.5)),
    ([1.0, 1.5, 3.0], [True] * 3, 0.0, 1e-8, _tas([1.0, 1.5, 3.0], 0.0)),  # both bounds of alpha_min allowed
    ([1.0, 1.5, 3.0], [True] * 3, 1.0, 1e-8, [1.0, 1.0, 1.0]),
    ([2.0, 4.0], [True, True], 0.8, 1e-8, _tas([2.0, 4.0], 0.8)),  # two valid responses are enough
    ([2.0, 4.0, 9.0], [True, True, False], 0.8, 1e-8, _tas([2.0, 4.0], 0.8) + [1.0]),
    ([2.0, 4.0], [True, False], 0.8, 1e-8, [1.0, 1.0]),  # one: no shaping
    ([0.0, 1e-6], [True, True], 0.8, 1e-8, [1.0, 1.0]),  # a spread of exactly 1e-6: no shaping
]


@pytest.mark.parametrize("scores,valid,alpha_min,eps,expected", TAS, ids=[str(i) for i in range(len(TAS))])
def test_tas_scales_table(scores, valid, alpha_min, eps, expected):
    out = tas_scales(torch.tensor(scores, dtype=torch.float64), torch.tensor(valid), alpha_min, eps)
    assert out.tolist() == pytest.approx(expected, rel=1e-6) and out.dtype == torch.float32


@pytest.mark.parametrize("alpha_min", [-0.01, 1.01])
def test_tas_refuses_alpha_min_outside_0_1(alpha_min):
    with pytest.raises(ValueError, match=rf"^VPPO alpha_min must be in \[0, 1\], got {alpha_min}$"):
        tas_scales(torch.tensor([1.0, 2.0]), torch.tensor([True, True]), alpha_min)


def test_tgf_keeps_the_top_ceil_k_tokens_ties_to_the_earlier():
    s = torch.tensor([[1.0, 1.0, 1.0, 0.0, 0.0], [0.1, 0.5, 0.3, 0.2, 0.0]])
    mask = torch.tensor([[True] * 5, [True, True, True, True, False]])
    assert tgf_mask(s, mask).tolist() == [[True, True, False, False, False], [False, True, True, False, False]]
    assert tgf_mask(s, mask, 1.0).tolist() == mask.tolist()
    assert tgf_mask(s, mask, 0.2).tolist() == [[True, False, False, False, False], [False, True, False, False, False]]
    with pytest.raises(ValueError, match=r"^VPPO top-k token ratio must be in \(0, 1\], got 1\.5$"):
        tgf_mask(s, mask, 1.5)


def test_padded_of_empty_rows_has_no_column():
    out, mask = padded([torch.zeros(0), torch.zeros(0)])
    assert out.shape == (2, 0) and mask.shape == (2, 0)
    assert padded([torch.ones(2)], width=4)[1].tolist() == [[True, True, False, False]]


def test_vppo_token_advantages_defaults_and_an_empty_response():
    adv = torch.tensor([1.0, 1.0, -1.0, 0.5])
    old = [torch.zeros(5), torch.zeros(5), torch.zeros(5), torch.zeros(0)]
    aug = [torch.tensor([-1.0, 0, 0, 0, 0]), torch.tensor([-2.0, -1, 0, 0, 0]), torch.tensor([-0.5, -0.5, -3, 0, 0]),
           torch.zeros(0)]
    a, s, scale, keep = vppo_token_advantages(adv, aug, old)
    a2, _, scale2, keep2 = vppo_token_advantages(adv, aug, old, alpha_min=0.9, k=0.4)
    assert torch.equal(a, a2) and torch.equal(scale, scale2) and torch.equal(keep, keep2)
    assert keep.sum(1).tolist() == [2, 2, 2, 0]  # ceil(0.4 x 5) = 2 tokens; none of the empty response
    sbar = (s.sum(1) / torch.tensor([5.0, 5.0, 5.0, 1.0])).double()
    assert scale.tolist() == pytest.approx(_tas(sbar[:3].tolist(), 0.9) + [1.0], rel=1e-5)  # the empty one is not shaped
    _, _, scale3, keep3 = vppo_token_advantages(adv, aug, old, alpha_min=0.5, k=0.2)
    assert scale3.tolist() == pytest.approx(_tas(sbar[:3].tolist(), 0.5) + [1.0], rel=1e-5)
    assert keep3.sum(1).tolist() == [1, 1, 1, 0]


# ---- the VPPO spec -----------------------------------------------------------------------------------------------
def _batch():
    b = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.95, 0.3, 0.25])
    return b


def test_vppo_spec_needs_and_missing_inputs():
    spec = build_spec("vppo", {}, LossParams())
    n = spec.needs()
    assert n.old is False and n.ref is False and list(n.rescore) == [PATCH, ORIGINAL_KEY]
    b = _batch()
    b.rescored = {PATCH: b.rescored[PATCH][:1], ORIGINAL_KEY: b.rescored[ORIGINAL_KEY]}
    with pytest.raises(ValueError, match=rf"^VPPO needs the re-scored log-probs '{re.escape(PATCH)}' of every response "
                                         r"\(got 1 for 4\)$"):
        spec.advantages(b)
    b.rescored = {}
    with pytest.raises(ValueError, match=r"\(got 0 for 4\)$"):
        spec.advantages(b)
    b = _batch()
    b.rescored[PATCH][2] = torch.zeros(3)
    with pytest.raises(ValueError, match=rf"^response 2: re-scored log-probs \(3,\) vs original \({len(TEXTS[2])},\)$"):
        spec.advantages(b)


def test_vppo_spec_reaches_its_params_and_reports_metrics():
    b = _batch()
    out = build_spec("vppo", {"dynamic_sampling": False}, LossParams()).advantages(b)
    base = build_spec("grpo", {}, LossParams()).advantages(b)
    ref, s, scale, keep = vppo_token_advantages(base.advantages, b.rescored[PATCH], b.logprobs)
    assert torch.allclose(out.advantages, ref, atol=1e-6)
    m = out.metrics
    assert m["vppo/dependency_mean"] == pytest.approx(float(s[padded(list(b.logprobs))[1]].mean()), rel=1e-5)
    assert m["vppo/scale_min"] == pytest.approx(float(scale.min())) and m["vppo/scale_max"] == pytest.approx(float(scale.max()))
    assert m["vppo/token_frac"] == pytest.approx(float(keep.sum()) / sum(len(t) for t in TEXTS))
    assert torch.equal(out.rewards, base.rewards)
    other = build_spec("vppo", {"dynamic_sampling": False, "alpha_min": 0.5, "top_k_ratio": 0.2}, LossParams()).advantages(b)
    ref2, _, _, _ = vppo_token_advantages(base.advantages, b.rescored[PATCH], b.logprobs, alpha_min=0.5, k=0.2)
    assert torch.allclose(other.advantages, ref2, atol=1e-6) and not torch.allclose(ref, ref2)
    # without dynamic sampling every row with a token counts in the TAS statistics, also a uniform group's
    b2 = make_batch(TEXTS, [1.0, 1.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.95, 0.3, 0.25])
    off = build_spec("vppo", {"dynamic_sampling": False}, LossParams()).advantages(b2)
    base2 = build_spec("grpo", {}, LossParams()).advantages(b2).advantages
    assert torch.allclose(off.advantages, vppo_token_advantages(base2, b2.rescored[PATCH], b2.logprobs)[0], atol=1e-6)
    # an empty response does not count in the TAS statistics either
    b3 = make_batch(TEXTS + [""], [1.0, 0.0, 1.0, 0.0, 1.0], [0, 0, 1, 1, 2], claim_p=[0.2, 0.95, 0.3, 0.25])
    three = build_spec("vppo", {"dynamic_sampling": False}, LossParams()).advantages(b3)
    base3 = build_spec("grpo", {}, LossParams()).advantages(b3).advantages
    _, _, scale3, _ = vppo_token_advantages(base3, b3.rescored[PATCH], b3.logprobs)
    assert three.metrics["vppo/scale_max"] == pytest.approx(float(scale3[:4].max()))
    assert three.metrics["vppo/scale_min"] == pytest.approx(float(scale3[:4].min()))
    # one token in the whole batch: the kept share is 1
    one = make_batch(["A"], [1.0], [0])
    assert build_spec("vppo", {"dynamic_sampling": False}, LossParams()).advantages(one).metrics["vppo/token_frac"] == 1.0
    empty = make_batch(["", ""], [1.0, 0.0], [0, 0])
    m0 = build_spec("vppo", {"dynamic_sampling": False}, LossParams()).advantages(empty).metrics
    assert (m0["vppo/dependency_mean"], m0["vppo/scale_min"], m0["vppo/scale_max"], m0["vppo/token_frac"]) == \
        (0.0, 1.0, 1.0, 0.0)


def test_vppo_dynamic_sampling_takes_the_correct_threshold():
    # group 0's accuracies 0.6 and 0.4: mixed at threshold 0.5, uniform (both correct) at 0.3, when dynamic
    # sampling leaves it out of the TAS statistics; group 1 is mixed at both
    b = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.95, 0.3, 0.25],
                   accuracy=[0.6, 0.4, 1.0, 0.0])
    lo = build_spec("vppo", {"correct_threshold": 0.5}, LossParams()).advantages(b).metrics["vppo/scale_max"]
    hi = build_spec("vppo", {"correct_threshold": 0.3}, LossParams()).advantages(b).metrics["vppo/scale_max"]
    assert hi == pytest.approx(1.1) and not math.isclose(lo, hi)  # two rows in the statistics: n = [0, 1]


def test_tgf_ties_go_to_the_earlier_tokens_on_a_long_response():
    # 30 tokens of equal dependency (an unstable sort would scramble them): the first ceil(0.4 x 30) = 12 stay
    s = torch.ones(1, 30)
    assert tgf_mask(s, torch.ones(1, 30, dtype=torch.bool)).flatten().tolist() == [True] * 12 + [False] * 18
