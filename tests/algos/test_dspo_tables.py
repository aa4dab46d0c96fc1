"""DSPO's formulas at non-default constants and its edges, as tables (specs/algorithms.md §3; arXiv 2609.36775):
DEDR with a non-unit covariance and temperatures, CVIG's ΔP / R_cf / weights in float64, the token spans of a
character-level tokenizer, non-square boxes, and the rewards honouring K and truncation."""
import math

import pytest
import torch

from mmrl.algos.dspo import cvig_row, response_box, token_offsets
from mmrl.algos.dspo_math import (box_area_ratio, box_pixel_mask, char_to_token_span, cvig_weights, dedr_terms,
                                  delta_p, mahalanobis, r_div)
from mmrl.rewards.dspo_format import dspo_prompt
from mmrl.rewards.dspo_rewards import evidence_box
from tests.algos.test_dspo_spec import ctx_of, resp

D = torch.float64


def test_mahalanobis_divides_by_the_diagonal_covariance():
    assert float(mahalanobis(torch.tensor([2.0, 1.0, 0.0]), torch.zeros(3), torch.tensor([4.0, 0.25, 1.0]))) == \
        pytest.approx(math.sqrt(1.0 + 4.0))


def _dedr(z, mu, s):
    """D_all and Delta_k by hand (the module docstring's formulas)."""
    def d(pts):
        m = [sum(p[j] for p in pts) / len(pts) for j in range(3)]
        return math.sqrt(sum((m[j] - mu[j]) ** 2 / s[j] for j in range(3)))
    d_all = d(z)
    return d_all, [d(z[:k] + z[k + 1:]) - d_all for k in range(len(z))]


# candidate sets of 2 and 4 (K != 3 = D, so a K/D mix-up shows) around a prior with a non-unit covariance
DEDR = [
    ([[0.1, 0.2, 0.3], [0.5, -0.1, 0.0]], [0.2, 0.0, 0.1], [0.5, 2.0, 0.25]),
    ([[0.1, 0.2, 0.3], [0.5, -0.1, 0.0], [-0.3, 0.4, 0.2], [0.0, 0.0, 0.9]], [0.0, 0.1, 0.2], [1.0, 0.5, 4.0]),
]


@pytest.mark.parametrize("z,mu,s", DEDR, ids=["K2", "K4"])
def test_dedr_terms_by_hand(z, mu, s):
    d_all, delta = dedr_terms(torch.tensor(z), torch.tensor(mu), torch.tensor(s))
    want_all, want_delta = _dedr(z, mu, s)
    assert float(d_all) == pytest.approx(want_all, rel=1e-6) and delta.tolist() == pytest.approx(want_delta, rel=1e-6)


def test_dedr_needs_two_candidates():
    with pytest.raises(ValueError, match=r"^leave-one-out needs at least 2 candidates, got 1$"):
        dedr_terms(torch.zeros(1, 3), torch.zeros(3), torch.ones(3))


def _r_div(z, mu, s, tau_ctr, tau_div, clamp=True, w=None):
    d_all, delta = _dedr(z, mu, s)
    if clamp:
        delta = [max(x, -tau_div) for x in delta]
    w = w or [1.0 / len(z)] * len(z)
    return math.exp(-d_all ** 2 / (2 * tau_ctr ** 2)) * sum(wk * (1 - math.exp(-x / tau_div)) for wk, x in zip(w, delta))


R_DIV = [  # (z, mu, s, tau_ctr, tau_div)
    (DEDR[0][0], [0.2, 0.0, 0.1], [0.5, 2.0, 0.25], 2.0, 1.0),
    (DEDR[0][0], [0.2, 0.0, 0.1], [0.5, 2.0, 0.25], 0.5, 0.3),
    (DEDR[1][0], [0.0, 0.1, 0.2], [1.0, 0.5, 4.0], 3.0, 0.002),  # tau_div small: the clamp binds
]


@pytest.mark.parametrize("z,mu,s,tau_ctr,tau_div", R_DIV, ids=[str(i) for i in range(len(R_DIV))])
def test_r_div_at_non_default_temperatures(z, mu, s, tau_ctr, tau_div):
    args = (torch.tensor(z), torch.tensor(mu), torch.tensor(s))
    assert r_div(*args, tau_ctr=tau_ctr, tau_div=tau_div) == pytest.approx(_r_div(z, mu, s, tau_ctr, tau_div), rel=1e-6)
    w = torch.softmax(torch.arange(len(z), dtype=torch.float32), 0)
    assert r_div(*args, w=w, tau_ctr=tau_ctr, tau_div=tau_div) == pytest.approx(
        _r_div(z, mu, s, tau_ctr, tau_div, w=w.tolist()), rel=1e-6)


def test_r_div_clamps_by_default():
    z, mu, s = DEDR[1][0], [0.0, 0.1, 0.2], [1.0, 0.5, 4.0]
    _, delta = _dedr(z, mu, s)
    assert min(delta) < -0.002  # the clamp at -tau_div binds
    args = (torch.tensor(z), torch.tensor(mu), torch.tensor(s))
    clamped = r_div(*args, tau_div=0.002)
    assert clamped == pytest.approx(_r_div(z, mu, s, 1.0, 0.002), rel=1e-6)
    assert clamped != pytest.approx(r_div(*args, tau_div=0.002, clamp=False), rel=1e-3)


@pytest.mark.parametrize("area,ok", [(0.0, True), (1.0, True), (-0.01, False), (1.01, False)])
def test_delta_p_area_bounds(area, ok):
    p, p_cf = torch.tensor([0.5, 0.25]), torch.tensor([0.25, 0.25])
    if ok:
        assert delta_p(p, p_cf, area).tolist() == [0.25 * (1 - area), 0.0]
    else:
        with pytest.raises(ValueError, match=rf"^area ratio must be in \[0, 1\], got {area}$"):
            delta_p(p, p_cf, area)


def test_cvig_weights_default_temperature_and_float64():
    dp = torch.tensor([0.1, 0.0, -0.05], dtype=torch.float32)
    w = cvig_weights(dp)
    e = [math.exp(float(torch.tensor(x, dtype=torch.float32)) / 0.1) for x in (0.1, 0.0, -0.05)]
    assert w.dtype == D and w.tolist() == pytest.approx([x / sum(e) for x in e], rel=1e-12)


# (token character offsets, character span, token range): a token touching the span only at its edge is not in it
SPANS = [
    ([(0, 2), (2, 4), (4, 6)], (2, 4), (1, 2)),
    ([(0, 2), (2, 4), (4, 6)], (1, 5), (0, 3)),
    ([(0, 3), (3, 3), (3, 6)], (3, 6), (2, 3)),
]


@pytest.mark.parametrize("offsets,span,tokens", SPANS, ids=[str(i) for i in range(len(SPANS))])
def test_char_to_token_span_table(offsets, span, tokens):
    assert char_to_token_span(offsets, span) == tokens


def test_char_to_token_span_names_the_span():
    with pytest.raises(ValueError, match=r"^no token covers characters \(6, 8\)$"):
        char_to_token_span([(0, 2), (2, 6)], (6, 8))


@pytest.mark.parametrize("box,ratio", [((0.2, 0.1, 0.5, 0.4), 0.3 * 0.3), ((0.5, 0.1, 0.9, 0.3), 0.4 * 0.2),
                                       ((0.5, 0.5, 0.4, 0.9), 0.0)])
def test_box_area_ratio(box, ratio):
    assert box_area_ratio(box) == pytest.approx(ratio)


def test_box_pixel_mask_on_a_non_square_image():
    m = box_pixel_mask((0.25, 0.5, 0.75, 1.0), 4, 8)  # rows 1..2, columns 4..7
    assert m.dtype == torch.bool
    assert m.int().tolist() == [[0] * 8, [0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1], [0] * 8]
    assert box_pixel_mask((0.0, 0.1, 1.0, 0.2), 2, 10).int().tolist() == [[0, 1, 0, 0, 0, 0, 0, 0, 0, 0]] * 2


def test_the_prompt_asks_for_k_candidates_in_four_steps():
    assert dspo_prompt() == dspo_prompt(5) == (
        "Answer in four steps.\n"
        "<step1> Describe the visual evidence for the emotion and give its region as "
        "\\bboxed{[ymin,xmin,ymax,xmax]} with coordinates in [0,1]. </step1>\n"
        "<step2> Reflect on how a viewer would feel and why. </step2>\n"
        "<step3> List 5 candidate emotions as \\list{e1, e2, ...}. </step3>\n"
        "<step4> Give your final choice as \\boxed{}. </step4>")
    assert "List 3 candidate emotions" in dspo_prompt(3)


# ---- CVIG per response, with a character-level tokenizer ----------------------------------------------------------
class Chars:
    """One token per character; id = code point."""

    @staticmethod
    def decode(ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


def _ids(text):
    return [ord(c) for c in text]


def test_token_offsets_stop_once_the_characters_are_covered():
    assert token_offsets(Chars, _ids("abcdef"), 3) == [(0, 1), (1, 2), (2, 3)]
    assert token_offsets(Chars, _ids("abcdef"), 0) == [(0, 1)]
    assert token_offsets(Chars, _ids("ab"), 9) == [(0, 1), (1, 2)]


def _row(cands, p, p_cf, **kw):
    text = resp(cands)
    ids = _ids(text)
    lp, lp_cf = torch.zeros(len(ids)), torch.zeros(len(ids))
    s3 = text.index("<step3>")
    for c, a, b in zip(cands, p, p_cf):
        at = text.index(c, s3)
        lp[at], lp_cf[at] = math.log(a), math.log(b)  # the candidate's first character carries its probability
    return text, ids, lp, lp_cf


def test_cvig_row_by_hand_in_float64():
    cands, p, p_cf = ["sadness", "fear", "gloom"], [0.5, 0.3, 0.2], [0.1, 0.3, 0.05]
    text, ids, lp, lp_cf = _row(cands, p, p_cf)
    terms = [0.1, 0.2, 0.3, 0.4]
    area = 0.3
    r_cf, r_w, t_mean = cvig_row(text, ids, lp, lp_cf, area, terms, Chars, 0.7, None)
    pk = [math.exp(float(torch.tensor(math.log(x), dtype=torch.float32))) for x in p]
    pcf = [math.exp(float(torch.tensor(math.log(x), dtype=torch.float32))) for x in p_cf]
    dp = [(a - b) * (1 - area) for a, b in zip(pk, pcf)]
    e = [math.exp(x / 0.7) for x in dp]
    assert r_cf == pytest.approx(sum(dp) / 3, rel=1e-12)
    assert r_w == pytest.approx(sum(x / sum(e) * t for x, t in zip(e, terms)), rel=1e-12)
    assert t_mean == pytest.approx(0.2, rel=1e-12)
    # area None: the response's own box (0.1, 0.2, 0.5, 0.6) covers 0.16 of the image
    assert cvig_row(text, ids, lp, lp_cf, None, terms, Chars, 0.7, None)[0] == \
        pytest.approx(sum((a - b) * 0.84 for a, b in zip(pk, pcf)) / 3, rel=1e-12)


def test_cvig_row_is_none_where_it_cannot_be_scored():
    text, ids, lp, lp_cf = _row(["sadness", "fear", "gloom"], [0.5, 0.3, 0.2], [0.1, 0.3, 0.05])
    assert cvig_row(text, ids, lp, lp_cf, 0.3, [0.1] * 4, Chars, 0.1, 2) is None  # K = 3 where 2 are asked
    assert cvig_row(text, ids, lp, lp_cf, 0.3, [0.1] * 4, Chars, 0.1, 3) is not None
    assert cvig_row(text, ids, lp, lp_cf, 0.3, [0.1] * 2, Chars, 0.1, None) is None  # more candidates than terms
    nan = lp_cf.clone()
    nan[0] = float("nan")
    assert cvig_row(text, ids, lp, nan, 0.3, [0.1] * 4, Chars, 0.1, None) is None  # not re-scored
    assert response_box(text, 3) == pytest.approx((0.1, 0.2, 0.5, 0.6)) and response_box(text, 2) is None


# ---- the rewards honour K and truncation ------------------------------------------------------------------------
def test_rewards_read_k_and_truncation():
    from mmrl.rewards.base import REWARDS

    texts = [resp(["sadness", "fear", "gloom"])]
    ctx = ctx_of(texts)
    assert REWARDS.get("dspo_format")(ctx, k=3)["dspo_format"] == [1.0]
    assert REWARDS.get("dspo_format")(ctx, k=2)["dspo_format"] == [0.0]
    assert REWARDS.get("dspo_accuracy")(ctx, k=2) == [0.0] and REWARDS.get("dspo_accuracy")(ctx) == [1.0]
    ctx[0].trajectory.truncated = True
    out = REWARDS.get("dspo_format")(ctx)
    assert out["dspo_format"] == [0.0] and out["dspo_format/truncated"] == [1.0]


class _Ev:
    def __init__(self, source_size):
        self.boxes = [(0.0, [10.0, 20.0, 30.0, 60.0])]
        self.source_size = source_size


class _Sample:
    id = "s7"

    def __init__(self, source_size):
        self.evidence = _Ev(source_size)


@pytest.mark.parametrize("source_size,size", [((100, 0), None), ((0, 80), None), (None, None)])
def test_an_evidence_box_without_a_whole_size_is_refused_naming_the_sample(source_size, size):
    with pytest.raises(ValueError, match=r"^sample 's7': evidence box without source_size$"):
        evidence_box(_Sample(source_size), size)


@pytest.mark.parametrize("word,norm", [("  Very   Happy. ", "very happy"), ("Xenon;", "xenon"), ("'calm'", "calm"),
                                       ("sad\tand\nlow", "sad and low")])
def test_normalize_emotion(word, norm):
    from mmrl.rewards.dspo_format import normalize_emotion

    assert normalize_emotion(word) == norm


# ---- the spec's binding to the reward config and its passes --------------------------------------------------------
def _cfg(*rewards):
    from types import SimpleNamespace

    return SimpleNamespace(rewards=[SimpleNamespace(name=n, weight=w) for n, w in rewards])


def _dspo(**params):
    from mmrl.algos.base import LossParams
    from mmrl.algos.spec import build_spec

    return build_spec("dspo", {"tokenizer": "unused", **params}, LossParams())


def test_bind_takes_the_div_weight_from_the_rewards():
    from mmrl.errors import ConfigError

    s = _dspo(cvig=False)
    s.bind(_cfg(("dspo_accuracy", 1.0)))
    assert s.params.div_weight == 0.0  # no dspo_div reward: weight 0
    s = _dspo(div_weight=0.3, mask="pixel")
    s.bind(_cfg(("dspo_div", 0.3), ("dspo_evidence", 0.0)))  # equal: accepted
    assert s.params.div_weight == 0.3
    with pytest.raises(ConfigError, match=r"^config key 'algorithm\.params\.div_weight' = 0\.3 differs from no 'dspo_div' "
                                          r"reward in 'rewards' \(weight 0\): the two must be equal"):
        _dspo(cvig=False, div_weight=0.3).bind(_cfg(("dspo_accuracy", 1.0)))
    _dspo(mask="feature").bind(_cfg(("dspo_div", 0.3)))  # feature masking reads no evidence reward
    with pytest.raises(ConfigError, match=r"needs the reward 'dspo_evidence'"):
        _dspo(mask="pixel").bind(_cfg(("dspo_div", 0.3)))


def test_needs_name_the_passes_and_keep_k():
    feat = _dspo(k=3).needs().rescore
    assert feat["cvig_orig"].transform == "identity" and feat["cvig_orig"].params == {}
    assert feat["cvig"].feature_box(resp(["joy", "fear", "calm"])) == pytest.approx((0.1, 0.2, 0.5, 0.6))
    assert feat["cvig"].feature_box(resp(["joy", "fear"])) is None  # K = 2 where 3 are required: no box
    px = _dspo(mask="pixel", intervention="occlude_box", intervention_params={"value": 0}).needs().rescore["cvig"]
    assert px.transform == "occlude_box" and px.params == {"value": 0}


# ---- the spec's CVIG shaping on a batch, with the character tokenizer ------------------------------------------------
def _shaping_batch():
    from mmrl.algos.spec import StepBatch

    rows = [(["sadness", "fear"], [0.5, 0.3], [0.1, 0.3]), (["joy", "calm"], [0.5, 0.5], [0.5, 0.5]),
            (["anger", "fear"], [0.4, 0.2], [0.4, 0.1]), (["joy", "fear"], [0.5, 0.5], [0.5, 0.5])]
    texts, ids, lp, lp_cf = [], [], [], []
    for cands, p, p_cf in rows:
        t, i, a, b = _row(cands, p, p_cf)
        texts.append(t), ids.append(torch.tensor(i)), lp.append(a), lp_cf.append(b)
    lp_cf[3] = torch.full_like(lp_cf[3], float("nan"))  # row 3: no box, not re-scored
    comps = {"dspo_format": torch.tensor([1.0, 0.0, 1.0, 1.0]),  # row 1 malformed (a truncated response, say)
             "dspo_div/t0": torch.tensor([0.2, 0.5, 0.1, 0.3]), "dspo_div/t1": torch.tensor([-0.1, 0.5, 0.3, 0.3])}
    n = len(rows)
    return StepBatch(rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]), components=comps,
                     groups={"prompt": torch.tensor([0, 0, 1, 1])}, roles=["anchor"] * n, views=["original"] * n,
                     lengths=torch.tensor([len(i) for i in ids]), response_ids=ids, texts=texts,
                     logprobs=[torch.zeros(len(i)) for i in ids], rescored={"cvig_orig": lp, "cvig": lp_cf})


def _shift(p, p_cf, terms, area, tau):
    pk = [math.exp(float(torch.tensor(math.log(x), dtype=torch.float32))) for x in p]
    pcf = [math.exp(float(torch.tensor(math.log(x), dtype=torch.float32))) for x in p_cf]
    dp = [(a - b) * (1 - area) for a, b in zip(pk, pcf)]
    e = [math.exp(x / tau) for x in dp]
    terms = [float(torch.tensor(t, dtype=torch.float32)) for t in terms]  # the components are float32
    return sum(dp) / len(dp), sum(x / sum(e) * t for x, t in zip(e, terms)) - sum(terms) / len(terms)


@pytest.mark.parametrize("p_source", ["rescore", "sampling"])
def test_cvig_shapes_the_rewards_row_by_row(monkeypatch, p_source):
    import mmrl.algos.dspo as dspo_mod

    monkeypatch.setattr(dspo_mod, "_tokenizer", lambda path: Chars)
    batch = _shaping_batch()
    if p_source == "sampling":  # p_k from the sampling log-probs: the re-scored pass is ignored
        batch.logprobs, batch.rescored["cvig_orig"] = batch.rescored["cvig_orig"], [torch.zeros(len(i)) for i in batch.response_ids]
    spec = _dspo(tau=0.5, cf_weight=0.2, div_weight=0.3, p_source=p_source, unbiased_std=False, eps=0.25)
    r, m = spec.shaped_rewards(batch)
    cf0, s0 = _shift([0.5, 0.3], [0.1, 0.3], [0.2, -0.1], 0.16, 0.5)
    cf2, s2 = _shift([0.4, 0.2], [0.4, 0.1], [0.1, 0.3], 0.16, 0.5)
    want = [1.0 + 0.2 * cf0 + 0.3 * s0, 0.0, 1.0 + 0.2 * cf2 + 0.3 * s2, 0.0]
    assert r.tolist() == pytest.approx(want, rel=1e-9)
    assert m == pytest.approx({"cvig/r_cf": (cf0 + cf2) / 4, "cvig/scored_frac": 0.5, "cvig/div_shift": (s0 + s2) / 2,
                               "cvig/no_box_frac": 0.25}, rel=1e-9)
    out = spec.advantages(batch)
    rr = torch.tensor(want, dtype=torch.float64)
    g = [rr[:2], rr[2:]]
    a = torch.cat([(x - x.mean()) / (x.std(unbiased=False) + 0.25) for x in g])
    assert out.advantages.dtype == torch.float32 and out.advantages.tolist() == pytest.approx(a.tolist(), rel=1e-5)
    a_unbiased = torch.cat([(x - x.mean()) / (x.std(unbiased=True) + 0.25) for x in g])
    out_u = _dspo(tau=0.5, cf_weight=0.2, div_weight=0.3, p_source=p_source, eps=0.25).advantages(batch)
    assert out_u.advantages.tolist() == pytest.approx(a_unbiased.tolist(), rel=1e-5)  # the default std is unbiased
    # k reaches the rows: with k = 3 every two-candidate response is malformed for CVIG
    r3, m3 = _dspo(div_weight=0.3, k=3).shaped_rewards(batch)
    assert r3.tolist() == [1.0, 0.0, 1.0, 0.0] and m3["cvig/scored_frac"] == 0.0 and m3["cvig/div_shift"] == 0.0
    # responses without a box are counted wherever they stand in the batch
    batch.rescored["cvig"][0] = torch.full_like(batch.rescored["cvig"][0], float("nan"))
    assert spec.shaped_rewards(batch)[1]["cvig/no_box_frac"] == 0.5


def test_cvig_names_what_the_step_did_not_give(monkeypatch):
    from mmrl.errors import ConfigError
    import mmrl.algos.dspo as dspo_mod

    monkeypatch.setattr(dspo_mod, "_tokenizer", lambda path: Chars)
    batch = _shaping_batch()
    del batch.components["dspo_div/t0"]
    with pytest.raises(ConfigError, match=r"^algorithm 'dspo' with cvig needs the rewards 'dspo_div' in 'rewards' "
                                          r"\(missing component dspo_div/t0\)$"):
        _dspo(div_weight=0.3).shaped_rewards(batch)
    with pytest.raises(ConfigError, match=r"^algorithm 'dspo' with cvig needs the rewards 'dspo_div' and dspo_evidence "
                                          r"in 'rewards' \(missing component dspo_div/t0\)$"):
        _dspo(div_weight=0.3, mask="pixel").shaped_rewards(batch)
    batch = _shaping_batch()
    del batch.rescored["cvig"]
    with pytest.raises(ConfigError, match=r"^algorithm 'dspo': the step gave no 'cvig' re-scoring pass$"):
        _dspo(div_weight=0.3).shaped_rewards(batch)


def test_dspo_params_and_construction():
    from mmrl.algos.base import LossParams
    from mmrl.algos.dspo import DSPOParams
    from mmrl.algos.spec import ALGORITHMS
    from mmrl.errors import ConfigError

    with pytest.raises(ValueError, match=r"^tau must be > 0, got 0\.0$"):
        DSPOParams(tau=0.0)
    with pytest.raises(ValueError, match=r"^p_source must be one of \('rescore', 'sampling'\), got 'both'$"):
        DSPOParams(p_source="both")
    loss = LossParams(clip_low=0.1)
    cls = ALGORITHMS.get("dspo")
    assert cls({"cvig": False}, loss).loss is loss
    with pytest.raises(ConfigError, match=r"^config key 'algorithm\.params\.bogus'"):
        cls({"bogus": 1}, loss)
    with pytest.raises(ConfigError, match=r"^config key 'x\.y\.bogus'"):
        cls({"bogus": 1}, loss, key="x.y")
    with pytest.raises(ConfigError, match=r"^config key 'algorithm\.params\.intervention_params' applies to "
                                          r"algorithm\.params\.mask: pixel"):
        cls({"tokenizer": "unused", "intervention_params": {"value": 0}}, loss)
