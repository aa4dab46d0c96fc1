"""The VAD lexicon (NRC-VAD and Warriner layouts, shipped words, OOV fallback) and the DSPO prior (Eqs. 2-4)."""
import pytest
import torch

from mmrl.data.affect import (BUILTIN_VAD, EMOSET8, EMOTION6, builtin_lexicon, load_lexicon, prior_from_distribution,
                              prior_from_label, sample_prior)
from mmrl.errors import DataError


def test_builtin_covers_classes_in_unit_range():
    for c in EMOTION6 + EMOSET8:
        assert c in BUILTIN_VAD
    assert all(0.0 <= x <= 1.0 for v in BUILTIN_VAD.values() for x in v)


def test_oov_stem_then_nearest_then_missing_counted():
    lex = builtin_lexicon()
    assert lex.resolve("joy") == "joy"
    lex.oov.clear()
    assert lex.resolve("joys") == "joy"  # Snowball stem "joy"
    assert lex.resolve("sadnes") == "sadness"  # nearest by string similarity
    assert lex.resolve("xylophone") is None
    assert dict(lex.oov) == {"stem": 1, "nearest": 1, "missing": 1}


def test_nrc_layout_unit_and_pm1(tmp_path):
    f = tmp_path / "nrc.txt"
    f.write_text("Word\tValence\tArousal\tDominance\nhappy\t1.000\t0.735\t0.772\nsad\t0.225\t0.333\t0.149\n")
    lex = load_lexicon(str(f))
    assert lex.values["happy"] == (1.0, 0.735, 0.772)
    g = tmp_path / "nrc2.txt"
    g.write_text("happy\t1.0\t0.47\t0.544\nsad\t-0.55\t-0.334\t-0.702\n")
    lex2 = load_lexicon(str(g))
    assert lex2.values["sad"] == pytest.approx((0.225, 0.333, 0.149))
    bad = tmp_path / "bad.txt"
    bad.write_text("happy\t1.0\t0.4\n")
    with pytest.raises(DataError, match="bad.txt:1"):
        load_lexicon(str(bad))
    with pytest.raises(DataError, match="not found"):
        load_lexicon(str(tmp_path / "none.txt"))


def test_warriner_layout_gives_sds(tmp_path):
    f = tmp_path / "warriner.csv"
    f.write_text(",Word,V.Mean.Sum,V.SD.Sum,V.Rat.Sum,A.Mean.Sum,A.SD.Sum,A.Rat.Sum,D.Mean.Sum,D.SD.Sum,D.Rat.Sum\n"
                 "1,joy,9,0.8,20,5,1.6,20,7,2.4,20\n2,grief,1,0.0,20,5,0.8,20,3,1.6,20\n")
    lex = load_lexicon(str(f))
    assert lex.values["joy"] == pytest.approx((1.0, 0.5, 0.75))
    assert lex.sds["joy"] == pytest.approx((0.1, 0.2, 0.3))
    p = prior_from_label(lex, "joy", cov_mode="var")
    assert torch.allclose(p.sigma, torch.tensor([0.01, 0.04, 0.09], dtype=torch.float64))


def test_prior_from_label_and_caption():
    lex = builtin_lexicon()
    p = prior_from_label(lex, "joy", sigma_default=0.2)
    assert torch.allclose(p.mu, torch.tensor(BUILTIN_VAD["joy"], dtype=torch.float64))
    assert torch.allclose(p.sigma, torch.full((3,), 0.2, dtype=torch.float64))
    q = prior_from_label(lex, "joy", mu_ctx=[0.58, 0.42, 0.39], sigma_default=0.2)
    sta = torch.tensor(BUILTIN_VAD["joy"], dtype=torch.float64)
    ctx = torch.tensor([0.58, 0.42, 0.39], dtype=torch.float64)
    assert torch.allclose(q.mu, (sta + ctx) / 2)
    assert torch.allclose(q.sigma, (0.2 + (sta - ctx) ** 2 / 4) / 2)
    with pytest.raises(DataError, match="qwerty"):
        prior_from_label(lex, "qwerty")


def test_prior_from_distribution():
    lex = builtin_lexicon()
    p = prior_from_distribution(lex, {"joy": 3, "sadness": 1}, cov_mode="var")
    zj, zs = (torch.tensor(BUILTIN_VAD[c], dtype=torch.float64) for c in ("joy", "sadness"))
    mu = 0.75 * zj + 0.25 * zs
    assert torch.allclose(p.mu, mu)
    assert torch.allclose(p.sigma, (0.75 * (zj - mu) ** 2 + 0.25 * (zs - mu) ** 2).clamp(min=1e-4))
    one = sample_prior(lex, {"emotion_dist": {"fear": 1.0}}, label="joy")
    assert torch.allclose(one.mu, torch.tensor(BUILTIN_VAD["fear"], dtype=torch.float64))
    with pytest.raises(DataError, match="non-negative"):
        prior_from_distribution(lex, {"joy": -1.0})
    with pytest.raises(ValueError):
        prior_from_label(lex, "joy", cov_mode="full")
