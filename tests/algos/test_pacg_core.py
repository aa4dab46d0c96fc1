"""PACG pure functions: specs/algorithms.md §2 vectors, claim segmentation, the gate on advantages."""
import math

import pytest
import torch

from mmrl.algos.pacg_claims import (
    PERCEPTION_LEXICON,
    chars_to_tokens,
    claim_char_spans,
    extract_claims,
    lexicon_pattern,
    sentence_spans,
    think_span,
    token_char_offsets,
)
from mmrl.algos.pacg_gate import (
    claim_scores,
    efs_tokens,
    gate_advantages,
    log_ratio,
    persistence_gate,
    retention_tokens,
)


def _span(rows, starts, ends):
    return torch.tensor(rows), torch.tensor(starts), torch.tensor(ends)


# ---- spec vector 1: scores ------------------------------------------------------------------------------------
def test_zero_shift_gives_full_persistence_and_zero_efs():
    lp = torch.tensor([-1.0, -2.0, -0.5])
    p, e = claim_scores([lp], [lp], *_span([0], [0], [3]))
    assert p.tolist() == [1.0] and e.tolist() == [0.0]


def test_halved_likelihood_gives_persistence_half():
    orig = torch.tensor([-1.0, -2.0, -0.5])
    p, e = claim_scores([orig - math.log(2)], [orig], *_span([0], [0], [3]))
    assert p.item() == pytest.approx(0.5)
    # EFS_t = e^d - d - 1 with d = -ln2: 0.5 + ln2 - 1
    assert e.item() == pytest.approx(0.5 + math.log(2) - 1)


def test_scores_clamp_and_gains_never_exceed_one():
    d = log_ratio(torch.tensor([100.0, -100.0, 3.0]), torch.zeros(3))
    assert d.tolist() == [20.0, -20.0, 3.0]
    assert efs_tokens(d).tolist()[0] == 10.0 and efs_tokens(d).tolist()[1] == 10.0  # e^-20 + 20 - 1 clamped
    assert efs_tokens(d).max() <= 10.0 and retention_tokens(d).max() <= 1.0
    assert retention_tokens(torch.tensor([2.0])).item() == 1.0  # a token gaining likelihood counts as kept


def test_claim_means_cover_only_their_span():
    a = torch.tensor([0.0, -math.log(2), -math.log(4), 0.0])
    p, _ = claim_scores([a, torch.zeros(2)], [torch.zeros(4), torch.zeros(2)], *_span([0, 0, 1], [1, 0, 0], [3, 1, 2]))
    assert p.tolist() == pytest.approx([(0.5 + 0.25) / 2, 1.0, 1.0])


def test_claim_scores_reject_mismatched_lengths():
    with pytest.raises(ValueError, match="response 0"):
        claim_scores([torch.zeros(3)], [torch.zeros(4)], *_span([0], [0], [2]))
    with pytest.raises(ValueError, match="past its response"):
        claim_scores([torch.zeros(3)], [torch.zeros(3)], *_span([0], [1], [5]))


# ---- spec vector 2: the gate ------------------------------------------------------------------------------------
def test_spec_gate_vector():
    out = persistence_gate(torch.tensor([0.2, 0.3, 0.25, 0.95]), kappa=1.0, gamma=0.5, eta=0.5)
    assert out.flagged.tolist() == [False, False, False, True]
    assert out.z[3].item() == pytest.approx(1.49, abs=5e-3)
    assert out.gain[3].item() == pytest.approx(max(0.5, 1 - 0.5 * (out.z[3].item() - 1)), abs=1e-6)
    assert out.gain[3].item() == pytest.approx(0.755, abs=2e-3)
    assert out.gain[:3].tolist() == [1.0, 1.0, 1.0]


def test_gain_floor_gamma():
    out = persistence_gate(torch.tensor([0.0] * 20 + [1.0]), kappa=1.0, gamma=0.5, eta=0.5)
    assert out.flagged.tolist() == [False] * 20 + [True]
    assert out.gain[-1].item() == 0.5  # z = 4.36: 1 - 0.5 * 3.36 < 0.5


def test_constant_persistence_flags_nothing():
    out = persistence_gate(torch.tensor([0.7, 0.7, 0.7]))
    assert not out.flagged.any() and out.gain.tolist() == [1.0, 1.0, 1.0]
    assert persistence_gate(torch.zeros(0)).flagged.numel() == 0


def test_per_group_statistics():
    p = torch.tensor([0.2, 0.3, 0.25, 0.95, 0.9, 0.9, 0.9, 0.9])
    batch = persistence_gate(p)
    grouped = persistence_gate(p, groups=torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]))
    assert grouped.flagged.tolist() == [False, False, False, True, False, False, False, False]
    # batch-wide, the persistent second group pulls the mean up and 0.95 is no outlier (z < 1)
    assert not batch.flagged.any()
    assert grouped.z[3].item() == pytest.approx(1.49, abs=5e-3) and batch.z[3].item() < 1.0


def test_quantile_mode_flags_top_q():
    p = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    out = persistence_gate(p, mode="quantile", q=0.2)
    assert out.flagged.tolist() == [False] * 8 + [True, True]
    assert (out.gain[out.flagged] < 1).all() and (out.gain[out.flagged] >= 0.5).all()
    with pytest.raises(ValueError, match="mode"):
        persistence_gate(p, mode="topk")


# ---- spec vectors 3, 4: applying the gate ------------------------------------------------------------------------
def test_gate_scales_only_positive_tokens_inside_flagged_claims():
    adv = torch.tensor([2.0, -1.0, 0.5])
    rows, starts, ends = _span([0, 1, 2], [1, 0, 0], [3, 2, 1])
    gain = torch.tensor([0.755, 0.6, 1.0])
    out = gate_advantages(adv, [4, 3, 2], rows, starts, ends, gain)
    assert out.shape == (3, 4)
    assert out[0].tolist() == pytest.approx([2.0, 2 * 0.755, 2 * 0.755, 2.0])  # tokens outside claims keep A
    assert out[1].tolist() == pytest.approx([-1.0, -1.0, -1.0, 0.0])  # negative advantage: unchanged (padding 0)
    assert out[2].tolist() == pytest.approx([0.5, 0.5, 0.0, 0.0])  # gain 1 = unflagged


def test_gate_on_per_token_base_advantages():
    base = torch.tensor([[1.0, 0.0, 1.0, 1.0, 9.0]])  # a VPPO row: filtered token 0, padding beyond length 4
    out = gate_advantages(base, [4], *_span([0], [0], [3]), torch.tensor([0.5]))
    assert out.tolist() == [[0.5, 0.0, 0.5, 1.0]]
    with pytest.raises(ValueError, match="advantages must be"):
        gate_advantages(torch.zeros(2, 2), [4, 1], *_span([], [], []), torch.zeros(0))


# ---- claim segmentation -------------------------------------------------------------------------------------
TEXT = "<think>I see a red square. It is big! The image shows two circles.\nSo the answer is B.</think><answer>B</answer>"


def test_think_span_and_sentences():
    a, b = think_span(TEXT)
    assert TEXT[a:b].startswith("I see") and TEXT[a:b].endswith("answer is B.")
    sents = [TEXT[x:y] for x, y in sentence_spans(TEXT, a, b)]
    assert sents == ["I see a red square.", "It is big!", "The image shows two circles.", "So the answer is B."]
    assert think_span("no tags here") is None
    assert think_span("<think>cut off") == (7, 14)


def test_lexicon_claims_whole_words_only():
    pat = lexicon_pattern(PERCEPTION_LEXICON)
    spans = [TEXT[a:b] for a, b in claim_char_spans(TEXT, pat)]
    assert spans == ["I see a red square.", "The image shows two circles."]
    assert not pat.search("a seesaw of imagery")  # no partial words
    assert claim_char_spans("I see it. <answer>A</answer>", pat) == []  # outside <think>: no claims


def test_pluggable_extractor():
    spans = claim_char_spans(TEXT, None, extractor=lambda s: "big" in s)
    assert [TEXT[a:b] for a, b in spans] == ["It is big!"]
    both = claim_char_spans(TEXT, lexicon_pattern(["square"]), extractor=lambda s: "big" in s)
    assert len(both) == 2


def test_token_spans_from_a_real_tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    ids = tok.encode(TEXT, add_special_tokens=False)
    decode = lambda x: tok.decode(x, skip_special_tokens=False)
    text, offsets = token_char_offsets(decode, ids)
    assert text == decode(ids) and offsets[-1][1] == len(text)
    claims = extract_claims(decode, [ids, tok.encode("plain answer B", add_special_tokens=False)])
    assert [c.text for c in claims] == ["I see a red square.", "The image shows two circles."]
    for c in claims:
        assert c.row == 0
        covered = decode(ids[c.tok_start:c.tok_end])
        assert c.text in covered and len(covered) <= len(c.text) + 4


def test_chars_to_tokens_edges():
    offs = [(0, 3), (3, 5), (5, 5), (5, 9)]
    assert chars_to_tokens(offs, 4, 6) == (1, 4)
    assert chars_to_tokens(offs, 20, 30) == (0, 0)


# quantile mode on P = 0.1 .. 1.0: mean 0.55, unbiased std 0.302765, the 0.8 quantile 0.82 has z = 0.891781;
# the flagged claims (0.9, 1.0) have z = 1.156012 and 1.486301, and the gain is measured from the quantile's z,
# whatever κ is: g = max(γ, 1 − η(z − 0.891781))
QUANTILE_GAINS = [
    (dict(kappa=1.0), [0.867884, 0.702740]),
    (dict(kappa=0.3), [0.867884, 0.702740]),
    (dict(kappa=2.5), [0.867884, 0.702740]),
    (dict(kappa=1.0, eta=2.0, gamma=0.1), [0.471537, 0.1]),
]


@pytest.mark.parametrize("params,gains", QUANTILE_GAINS, ids=[str(i) for i in range(len(QUANTILE_GAINS))])
def test_quantile_gain_is_measured_from_the_quantiles_z(params, gains):
    p = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    out = persistence_gate(p, mode="quantile", q=0.2, **params)
    assert out.flagged.tolist() == [False] * 8 + [True, True]
    assert out.threshold.tolist() == pytest.approx([0.891781] * 10, abs=1e-5)
    assert out.z[-2:].tolist() == pytest.approx([1.156012, 1.486301], abs=1e-5)
    assert out.gain.tolist() == pytest.approx([1.0] * 8 + gains, abs=1e-5)


def test_quantile_thresholds_are_per_group():
    # two groups of 5: each flags its own top claim (q = 0.2), measured from its own quantile's z
    p = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.65, 0.7, 0.75, 0.95])
    g = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    out = persistence_gate(p, g, mode="quantile", q=0.2)
    assert out.flagged.tolist() == [False] * 4 + [True] + [False] * 4 + [True]
    # group 0: mean 0.3, std 0.158114, quantile 0.42 -> z 0.758947; 0.5 -> z 1.264911
    assert out.gain[4].item() == pytest.approx(1 - 0.5 * (1.264911 - 0.758947), abs=1e-5)
    assert out.threshold[:5].tolist() == pytest.approx([0.758947] * 5, abs=1e-5)
