"""bench/vhop_preflight.py: the probe on hand-made features, the constant chance, the can-act rule, top-1 hits, the
attribute labels, and the results file's render and rewrite (no model)."""
import pytest
import torch
from support import load_bench


def _bench():
    return load_bench("vhop_preflight")


def test_probe_reads_a_separable_feature_and_not_noise():
    b = _bench()
    g = torch.Generator().manual_seed(0)
    labels = ["red", "blue", "green"]
    y_tr = [labels[i % 3] for i in range(90)]
    y_te = [labels[i % 3] for i in range(30)]

    def feats(y):  # class in dimension 0..2, plus noise dims
        x = torch.randn(len(y), 6, generator=g) * 0.1
        for i, v in enumerate(y):
            x[i, labels.index(v)] += 1.0
        return x

    r = b.score_probe(feats(y_tr), y_tr, feats(y_te), y_te)
    assert r["acc"] == 1.0 and r["n"] == 30 and r["classes"] == 3
    assert r["chance"] == pytest.approx(1 / 3)
    noise = b.score_probe(torch.randn(90, 6, generator=g), y_tr, torch.randn(30, 6, generator=g), y_te)
    assert noise["acc"] < 0.7  # no signal: near a third, never the separable 100%


def test_probe_refuses_one_class():
    with pytest.raises(ValueError, match="a probe needs >= 2 train classes"):
        _bench().score_probe(torch.zeros(3, 2), ["a"] * 3, torch.zeros(1, 2), ["a"])


def test_constant_chance_is_the_most_frequent_share():
    assert _bench().constant_chance(["a", "b", "b", "c"]) == 0.5


def test_can_act_rule():
    b = _bench()

    def row(acc, chance, n, hop1, scene):
        return {"probes": {"output": {"emblem": {"acc": acc, "chance": chance, "n": n}}},
                "retrieval": {"hop1": hop1, "hop1_scene_only": scene, "n_hop1": 100}}

    ok, why = b.can_act(row(0.40, 0.05, 200, 0.50, 0.05))
    assert ok, why
    # se at chance 0.05, n 200: 0.0154; 0.05 + 2 se = 0.0808 -> 0.08 is not enough, 0.09 is
    assert not b.can_act(row(0.08, 0.05, 200, 0.50, 0.05))[0]
    assert b.can_act(row(0.09, 0.05, 200, 0.50, 0.05))[0]
    ok, why = b.can_act(row(0.40, 0.05, 200, 0.06, 0.05))
    assert not ok and "hop-1 top-1 6.0% is not above the scene-only level 5.0%" in why and "emblem" not in why


def test_top1_hits_with_exclusion():
    b = _bench()
    img = torch.eye(3)
    q = torch.tensor([[1.0, 0.5, 0.0], [1.0, 0.5, 0.0]])
    assert b.top1_hits(q, img, [0, 1]) == [1.0, 0.0]
    assert b.top1_hits(q, img, [0, 1], [[1], [0]]) == [1.0, 1.0]


def test_attribute_labels():
    b = _bench()
    meta = {"main": {"colour": "red", "shape": "cross"}, "scene": {"colour": "navy", "ground": "dots"},
            "emblem": {"colour": "blue", "shape": "circle"}}
    assert b.attribute_labels(meta) == {"main": "red cross", "scene": "navy dots", "emblem": "blue circle",
                                        "emblem_colour": "blue", "emblem_shape": "circle"}
    assert "emblem" not in b.attribute_labels(dict(meta, emblem=None))


def _row(seed, size, emb, ok):
    p = {"acc": 0.5, "chance": 0.1, "n": 100}
    return {"seed": seed, "size": size, "embedder": emb, "images": {"train": 900, "test": 450}, "pretrain": None,
            "probes": {f: {a: p for a in ("emblem", "emblem_colour", "emblem_shape", "main", "scene")}
                       for f in ("output", "tokens")},
            "retrieval": {"hop1": 0.2, "hop1_chance": 0.01, "hop1_scene_only": 0.05, "n_hop1": 100, "hop2": 0.1,
                          "hop2_scene_only": 0.06, "probe_hop1": 0.3, "probe_hop2": 0.2, "n_hop2": 80},
            "can_act": ok, "reason": "ok" if ok else "emblem accuracy 4.0% is not above chance"}


def test_render_verdict(tmp_path):
    b = _bench()
    lines = b.render([_row(s, 56, "base", s != 1) for s in range(3)], "CMD")
    text = "\n".join(lines)
    assert "CMD" in text and "**no**: emblem accuracy 4.0%" in text and "cannot act" in text
    assert "carry a link?** (hop-2 by the probes alone above its scene-only level by 2 s.e. on every seed): yes" in text
    assert text.count("| 56 | base |") == 3 and "| 30.0 / 20.0 |" in text
    good = "\n".join(b.render([_row(s, 112, "base", True) for s in range(3)], "CMD", smoke=True))
    assert "can act with the base embedder at 112 px" in good and "SMOKE RUN" in good


def test_write_results_keeps_earlier_content(tmp_path):
    b = _bench()
    f = tmp_path / "vhop.md"
    f.write_text("# VHOP router\n\nold table\n")
    b.write_results(f, ["## Pre-flight", "first"])
    b.write_results(f, ["## Pre-flight", "second"])
    text = f.read_text()
    assert text.startswith("# VHOP router\n\n## Pre-flight\nsecond")
    assert "first" not in text and text.count("old table") == 1 and text.count("## Earlier runs") == 1


def test_probe_hops_follow_the_read_emblem():
    """Three images in one scene: a (red circle, emblem blue square) -> b (blue square); c (green cross) is a
    decoy. Probes that read perfectly find a for hop 1 and b for hop 2; a probe that reads the emblem as the decoy's
    object sends hop 2 to c."""
    from types import SimpleNamespace as NS

    b = _bench()
    corpus = NS(items=[NS(id="a"), NS(id="b"), NS(id="c")])
    q = NS(chain=["a", "b"], meta={"start": {"main": {"colour": "red", "shape": "circle"},
                                             "scene": {"colour": "navy", "ground": "dots"}}})
    mains = ["blue square", "green cross", "red circle"]
    lp_main = torch.log(torch.tensor([[0.01, 0.01, 0.98], [0.98, 0.01, 0.01], [0.01, 0.98, 0.01]]))
    lp_scene = torch.zeros(3, 1)
    good = {"main": (mains, lp_main), "scene": (["navy dots"], lp_scene),
            "emblem": (["blue square", "green cross"], torch.log(torch.tensor([[0.9, 0.1]] * 3)))}
    assert b.probe_hops(good, corpus, [q]) == {"probe_hop1": 1.0, "probe_hop2": 1.0}
    bad = dict(good, emblem=(["blue square", "green cross"], torch.log(torch.tensor([[0.1, 0.9]] * 3))))
    assert b.probe_hops(bad, corpus, [q]) == {"probe_hop1": 1.0, "probe_hop2": 0.0}


def test_render_link_verdict_needs_every_seed():
    b = _bench()
    rows = [_row(s, 56, "base", False) for s in range(3)]
    rows[2]["retrieval"]["probe_hop2"] = 0.10  # 0.06 + 2 * sqrt(0.06 * 0.94 / 80) = 0.113 > 0.10
    text = "\n".join(b.render(rows, "CMD"))
    assert "on every seed): no." in text
