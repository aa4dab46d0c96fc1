"""BPO's contract reward as a reward function, one row per role and answer (formulas in ``mmrl/algos/bpo.py``).

Candidates: A red (gold), B green, C blue, D "cannot be determined" (the abstention option). One prompt group,
one pack, whose anchor answers A (or B in the second group, to separate "agrees with the anchor" from "is right").
"""
import pytest

from mmrl.rewards.bpo_contract import abstain_letter, bpo_contract
from tests.rewards.rewards_support import ctx

ROWS = [
    # role, view, expected, text, contract reward, accuracy, format
    ("stable", "noise", "A", "A", 1.0, 1.0, 1.0),  # agrees with the anchor and is right
    ("stable", "noise", "A", "B", 0.0, 0.0, 1.0),
    ("stable", "noise", "A", "D", 0.0, 0.0, 1.0),  # abstaining on a stable view earns nothing
    ("stable", "noise", "A", "", 0.0, 0.0, 0.0),
    ("sensitive", "reverse", "B", "B", 1.0, 1.0, 1.0),  # counterfactual gold known: must answer it
    ("sensitive", "reverse", "B", "A", 0.0, 0.0, 1.0),
    ("sensitive", "reverse", "B", "C", 0.0, 0.0, 1.0),  # != gold but != counterfactual gold either
    ("sensitive", "shuffle", None, "C", 1.0, 0.0, 1.0),  # no counterfactual label: any answer but the gold
    ("sensitive", "shuffle", None, "A", 0.0, 0.0, 1.0),
    ("sensitive", "shuffle", None, "D", 1.0, 0.0, 1.0),  # abstaining counts as != gold
    ("sensitive", "shuffle", None, "no idea", 0.0, 0.0, 0.0),  # no answer earns nothing
    ("abstain", "blank", "abstain", "D", 1.0, 1.0, 1.0),
    ("abstain", "blank", "abstain", "(D)", 1.0, 1.0, 1.0),
    ("abstain", "blank", "abstain", "A", 0.0, 0.0, 1.0),
    ("abstain", "blank", "abstain", "", 0.0, 0.0, 0.0),  # a blank answer is not an abstention
    ("abstain", "blank", "abstain", "I cannot tell", 0.0, 0.0, 0.0),
]


def _batch(rows, anchor_text="A", anchor_truncated=False):
    out = [ctx(anchor_text, "A", truncated=anchor_truncated)]
    out += [ctx(text, exp, role=role, view=view) for role, view, exp, text, *_ in rows]
    return out


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}-{r[3] or 'blank'}-{r[2]}" for r in ROWS])
def test_contract_reward_per_role(row):
    out = bpo_contract(_batch([row]))
    *_, reward, acc, fmt = row
    assert out["bpo_contract"] == pytest.approx([1.1, reward])
    assert out["accuracy"] == [1.0, acc]
    assert out["format"] == [1.0, fmt]


def test_whole_table_in_one_batch_equals_row_by_row():
    out = bpo_contract(_batch(ROWS))
    assert out["bpo_contract"] == pytest.approx([1.1] + [r[4] for r in ROWS])


@pytest.mark.parametrize("anchor_text,truncated,reward", [("A", False, 1.1), ("A", True, 1.0), ("B", False, 0.1),
                                                           ("D", False, 0.0), ("", False, 0.0),
                                                           ("It is A", False, 1.0)])
def test_anchor_reward_is_accuracy_plus_format_weight(anchor_text, truncated, reward):
    out = bpo_contract([ctx(anchor_text, "A", truncated=truncated)])
    assert out["bpo_contract"] == pytest.approx([reward])


def test_fmt_weight_param():
    assert bpo_contract([ctx("A", "A")], fmt_weight=0.5)["bpo_contract"] == pytest.approx([1.5])


def test_stable_view_must_agree_with_its_own_packs_anchor():
    """Group 1's anchor answers B (wrong): a right answer A on its stable view disagrees with it -> 0."""
    c = [ctx("A", "A", group=0), ctx("B", "A", group=1), ctx("A", "A", role="stable", view="noise", group=0),
         ctx("A", "A", role="stable", view="noise", group=1),
         ctx("B", "A", role="stable", view="noise", group=1)]
    assert bpo_contract(c)["bpo_contract"] == pytest.approx([1.1, 0.1, 1.0, 0.0, 0.0])


def test_abstain_text_param_picks_the_abstention_option():
    cands = ["red", "green", "none of these"]
    c = [ctx("A", "A", candidates=cands), ctx("C", "abstain", role="abstain", view="blank", candidates=cands)]
    assert bpo_contract(c, abstain_text="None of  These")["bpo_contract"] == pytest.approx([1.1, 1.0])
    # with the default text, C is a plain answer, not an abstention
    assert bpo_contract(c)["bpo_contract"] == pytest.approx([1.1, 0.0])


@pytest.mark.parametrize("cands,text,letter", [(["a", "b", "cannot be determined"], "cannot be determined", "C"),
                                               (["a", "Cannot  Be Determined"], "cannot be determined", "B"),
                                               (["a", "b"], "cannot be determined", None)])
def test_abstain_letter(cands, text, letter):
    assert abstain_letter(cands, text) == letter
