"""DSPO's DEDR and CVIG functions on the spec's hand-computed vectors (specs/algorithms.md §3, unit tests 1-4)."""
import math

import pytest
import torch

from mmrl.algos.dspo_math import (box_area_ratio, box_pixel_mask, box_token_mask, char_to_token_span, cvig_weights,
                                  dedr_terms, delta_p, r_cf, r_div, span_prob)

MU, I3 = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
Z = torch.tensor([[1.0, 0, 0], [-1.0, 0, 0], [0, 2.0, 0]], dtype=torch.float64)


def test_spec_vector_1_dedr():
    d_all, delta = dedr_terms(Z, MU, I3)
    assert float(d_all) == pytest.approx(0.6667, abs=1e-4)
    assert torch.allclose(delta, torch.tensor([0.4514, 0.4514, -0.6667], dtype=torch.float64), atol=1e-4)
    assert r_div(Z, MU, I3, tau_ctr=1.0, tau_div=1.0, clamp=False) == pytest.approx(-0.0591, abs=1e-4)


def test_clamp_bounds_negative_delta():
    # clamped: Delta_3 = -1 instead of -0.6667 -> the term is 1 - e, not 1 - e^0.6667
    got = r_div(Z, MU, I3, tau_ctr=1.0, tau_div=0.5, clamp=True)
    d_all, delta = dedr_terms(Z, MU, I3)
    delta = delta.clamp(min=-0.5)
    want = math.exp(-float(d_all) ** 2 / 2) * float((1 - torch.exp(-delta / 0.5)).mean())
    assert got == pytest.approx(want, abs=1e-9)
    assert got > r_div(Z, MU, I3, tau_div=0.5, clamp=False)


def test_r_div_maximal_when_centroid_on_prior():
    # spec test 4: candidates symmetric around mu* (centroid on it) beat the same set shifted off it
    on = torch.tensor([[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0]], dtype=torch.float64)
    base = r_div(on, MU, I3)
    for shift in (0.1, 0.3, 1.0):
        off = on + torch.tensor([shift, 0.0, 0.0], dtype=torch.float64)
        assert r_div(off, MU, I3) < base


def test_single_candidate_gives_zero_and_weights_enter():
    assert r_div(Z[:1], MU, I3) == 0.0
    w = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    d_all, delta = dedr_terms(Z, MU, I3)
    assert r_div(Z, MU, I3, w=w, clamp=False) == pytest.approx(
        math.exp(-float(d_all) ** 2 / 2) * (1 - math.exp(float(-delta[2]))), abs=1e-12)


def test_spec_vector_2_cvig():
    dp = delta_p(torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.1, 0.3, 0.25]), 0.25)
    assert torch.allclose(dp, torch.tensor([0.3, 0.0, -0.0375], dtype=torch.float64), atol=1e-9)
    assert r_cf(dp) == pytest.approx(0.0875, abs=1e-9)
    assert torch.allclose(cvig_weights(dp, 0.1), torch.tensor([0.9225, 0.0459, 0.0316], dtype=torch.float64), atol=1e-4)
    with pytest.raises(ValueError):
        delta_p(torch.ones(1), torch.ones(1), 1.5)


def test_spec_vector_3_box_mapping():
    # grid (1, 8, 12) patches -> 4 x 6 tokens after the 2x2 merge; a full box masks every token
    assert box_token_mask([0, 0, 1, 1], (1, 8, 12)).all()
    m = box_token_mask([0.1, 0.2, 0.3, 0.5], (1, 8, 12)).view(4, 6)
    # rows floor(0.4)=0 .. ceil(1.2)=2 -> 0,1 ; cols floor(1.2)=1 .. ceil(3.0)=3 -> 1,2
    want = torch.zeros(4, 6, dtype=torch.bool)
    want[0:2, 1:3] = True
    assert torch.equal(m, want)
    assert box_token_mask([0.5, 0.5, 0.5001, 0.5001], (2, 4, 4)).sum() == 2  # one token per frame
    assert box_pixel_mask([0, 0, 1, 1], 5, 7).all()
    assert box_pixel_mask([0.5, 0.0, 1.0, 0.5], 4, 4).sum() == 4
    assert box_area_ratio([0.0, 0.0, 0.5, 0.5]) == 0.25
    with pytest.raises(ValueError):
        box_token_mask([0, 0, 1, 1], (1, 7, 8))


def test_span_probability_and_char_spans():
    lp = torch.log(torch.tensor([0.9, 0.5, 0.4, 0.8]))
    assert span_prob(lp, (1, 3)) == pytest.approx(0.2, abs=1e-6)
    offsets = [(0, 3), (3, 8), (8, 9), (9, 14)]
    assert char_to_token_span(offsets, (4, 10)) == (1, 4)
    with pytest.raises(ValueError):
        char_to_token_span(offsets, (20, 22))
