"""bench/dspo_preflight.py: the short response, the random box, CVIG's spread statistic and the can-act rule on hand
values, and the render of hand-made seed records (no model)."""
import json
import math
import random
from types import SimpleNamespace

import pytest
from support import load_bench

REF = ("<step1>colour 219 11 244 \\bboxed{[0.48, 0.64, 0.82, 0.98]}</step1><step2>V 0.0 A 0.9 D 0.4</step2>"
       "<step3>\\list{disgust, fear, anger, sadness, surprise}</step3><step4>\\boxed{disgust}</step4>")


def _bench():
    return load_bench("dspo_preflight")


def test_short_response_drops_the_colour_and_still_parses():
    from mmrl.rewards.dspo_format import parse_dspo

    short = _bench().short_response(REF)
    assert short.startswith("<step1>\\bboxed{[0.48") and "colour" not in short
    p = parse_dspo(short, k=5)
    assert p.ok and p.box == (0.48, 0.64, 0.82, 0.98) and p.choice == "disgust" and len(p.candidates) == 5


def test_random_box_keeps_the_size_and_stays_inside():
    b, rng = _bench(), random.Random(0)
    boxes = [b.random_box((0.48, 0.64, 0.82, 0.98), rng) for _ in range(50)]
    for y0, x0, y1, x1 in boxes:
        assert 0.0 <= y0 and y1 <= 1.0 and 0.0 <= x0 and x1 <= 1.0
        assert y1 - y0 == pytest.approx(0.34) and x1 - x0 == pytest.approx(0.34)
    assert len({round(bx[0], 6) for bx in boxes}) > 40  # placed at random, not at one spot


def test_spread_stats_on_hand_values():
    s = _bench().spread_stats(gold=[3.0, 2.0, 1.0, 0.0], rand=[1.0, 1.0, 1.0, 1.0], groups=[0, 0, 1, 1])
    # d = [2, 1, 0, -1]: gold wins 2, ties 1 (half), loses 1; the CI is over the 2 prompts' means 1.5 and -0.5
    assert s["n"] == 4.0 and s["gold_wins"] == pytest.approx(0.625) and s["diff"] == pytest.approx(0.5)
    assert s["gold_drop"] == pytest.approx(1.5) and s["rand_drop"] == pytest.approx(1.0)
    half = 12.706 * math.sqrt(2.0) / math.sqrt(2.0)  # t(1 dof) x sd of (1.5, -0.5) / sqrt(2)
    assert s["diff_lo"] == pytest.approx(0.5 - half, abs=1e-2) and s["diff_hi"] == pytest.approx(0.5 + half, abs=1e-2)
    uneven = _bench().spread_stats([2.0, 2.0, 0.0], [0.0, 0.0, 0.0], [0, 0, 1])
    assert uneven["diff"] == pytest.approx(1.0) and uneven["prompts"] == 2.0  # mean of the prompts' means, not 4/3
    empty = _bench().spread_stats([], [], [])
    assert empty["n"] == 0.0 and math.isnan(empty["diff"])


def _stats(**kw):
    s = {"boxed": 0.9, "cand_diff": 0.4, "cand_lo": 0.1, "cand_hi": 0.7, "cand_wins": 0.8}
    s.update(kw)
    return s


def test_can_act_rule():
    can = _bench().can_act
    assert can(_stats()) == (True, "ok")
    ok, why = can(_stats(boxed=0.3))
    assert not ok and "30% of the sampled responses are well-formed" in why
    ok, why = can(_stats(cand_lo=-0.05))
    assert not ok and "not above 0" in why
    ok, why = can(_stats(cand_wins=0.55))
    assert not ok and "55% of" in why
    assert not can(_stats(cand_lo=float("nan")))[0]  # one prompt: no interval, no claim


def _rec(seed, gold_lp, rand_lp):
    """A seed record whose 4 boxed responses (2 prompts) lose ``gold_lp`` / ``rand_lp`` nats under the masks."""
    cv = [{"group": i // 2, "tokens": 16, "gold_tokens": 4, "rand_tokens": 4, "shared_tokens": 1, "lp": -10.0,
           "lp_gold": -10.0 - g, "lp_rand": -10.0 - r, "cand": -2.0, "cand_gold": -2.0 - g / 2, "cand_rand": -2.0 - r / 2}
          for i, (g, r) in enumerate(zip(gold_lp, rand_lp))]
    return {"seed": seed, "size": 112, "test_items": [["emotion", 6]] * 8, "eval": {"top1": 0.5, "well_formed": 1.0,
            "box_iou": 0.4}, "greedy_truncated": [False] * 8,
            "groups": {"rewards": [[1, 0], [1, 1]], "correct": [[1, 0], [1, 1]], "qtypes": ["emotion"] * 2,
                       "components": {"dspo_evidence": [[0.5, 0.0], [0.25, 0.25]]}, "truncated": [[False, False], [False, False]]},
            "n_sampled": 4, "cvig": cv, "longest_trace": 140, "mean_trace": 135.0, "sft_steps": 3, "sft_lr": 1e-3,
            "n_train": 8, "max_new_tokens": 176, "minutes": {"sft": 1, "eval": 1, "rollout": 1, "cvig": 1, "total": 4}}


def test_mechanism_stats_and_render_on_hand_records():
    b = _bench()
    acts, flat = _rec(0, [2.0, 2.2, 1.8, 2.1], [0.1, 0.2, 0.0, 0.1]), _rec(1, [0.5, 0.1, 0.4, 0.2], [0.5, 0.1, 0.4, 0.2])
    s = b.mechanism_stats(acts)
    assert s["own_iou"] == pytest.approx(0.25)
    assert s["boxed"] == 1.0 and s["tokens"] == 16 and s["gold_tokens"] == 4 and s["shared"] == 1
    assert s["diff"] == pytest.approx(1.925) and s["gold_wins"] == 1.0 and s["diff_lo"] > 0 and s["prompts"] == 2
    assert s["cand_diff"] == pytest.approx(1.925 / 2) and s["cand_wins"] == 1.0  # candidate drops: half the response's
    proto = SimpleNamespace(n_val=2, n_test=8, seeds=[0, 1], smoke=True, command="python bench/dspo_preflight.py --smoke",
                            header=lambda title: [f"# {title}", ""])
    args = SimpleNamespace(model="base", group_size=2, render_only=False)
    text = "\n".join(line for sec in b.render([acts, flat], proto, args).sections for line in sec)
    assert "### 112 px images" in text and "| 112 px | 0 | 4 (100%), 2 prompts | 16 | 4.00 (1.00) |" in text
    rows = [line for line in text.splitlines() if line.startswith("| 112 px |")]
    assert rows[0].endswith("| yes |") and "**no**" in rows[1] and "not above 0" in rows[1]
    assert "no on seed(s) [1]" in text


def test_records_round_trip_through_json(tmp_path):
    """A record written by run_seed is JSON; --render-only reads it back to the same statistics."""
    b, rec = _bench(), _rec(2, [1.0, 1.5, 1.2, 0.9], [0.2, 0.1, 0.3, 0.0])
    p = tmp_path / "preflight.json"
    p.write_text(json.dumps(rec))
    assert b.mechanism_stats(json.loads(p.read_text())) == b.mechanism_stats(rec)


def test_box_coverage_on_hand_boxes():
    b = _bench()
    # 56 px: 4x4 patches -> a 2x2 token map; a box of half the side at the corner covers 1 token, a random box of
    # that size (almost never aligned) straddles both rows and columns: all 4; the whole image is the same box
    full = b.box_coverage([(0.0, 0.0, 1.0, 1.0)], (1, 4, 4), random.Random(0))
    assert full["tokens"] == 4 and full["gold"] == 4 and full["random"] == 4 and full["same"] == 1.0
    corner = b.box_coverage([(0.0, 0.0, 0.5, 0.5)] * 200, (1, 4, 4), random.Random(0))
    assert corner["gold"] == 1.0 and corner["random"] == 4.0 and corner["shared"] == 1.0 and corner["same"] == 0.0
    big = b.box_coverage([(0.0, 0.0, 0.5, 0.5)] * 200, (1, 8, 8), random.Random(0))  # 112 px: 4x4 tokens
    assert big["tokens"] == 16 and big["gold"] == 4.0 and big["random"] == 9.0 and big["shared"] < 4.0
