"""DSPO rewards and spec: R_div from the lexicon prior, the evidence IoU, CVIG's shaping of the reward on a batch
whose re-scored log-probs are set by hand, and the plan of passes."""
import math

import pytest
import torch

from mmrl.algos.base import LossParams
from mmrl.algos.dspo import token_offsets
from mmrl.algos.dspo_math import dedr_terms
from mmrl.algos.spec import StepBatch, build_spec
from mmrl.data.affect import BUILTIN_VAD, builtin_lexicon, sample_prior
from mmrl.data.schema import Evidence, Sample, Trajectory
from mmrl.errors import ConfigError
from mmrl.rewards.base import REWARDS, RewardContext, RewardSpec, compute_rewards

EMO = ["anger", "disgust", "fear", "joy", "sadness", "surprise"]


def resp(cands, choice="sadness", box="0.1, 0.2, 0.5, 0.6"):
    return (rf"<step1>dark sky \bboxed{{[{box}]}}</step1><step2>low mood</step2>"
            rf"<step3>\list{{{', '.join(cands)}}}</step3><step4>\boxed{{{choice}}}</step4>")


def ctx_of(texts, meta=None):
    s = Sample(id="m0", question="q", candidates=EMO, answer="sadness", meta=meta or {},
               evidence=Evidence(boxes=[(0.0, [20.0, 10.0, 60.0, 50.0])], source_size=(100, 100)))
    out = []
    for t in texts:
        tr = Trajectory(sample_id="m0", group_id=0, view="original", role="anchor", prompt_ids=torch.zeros(1),
                        response_ids=torch.zeros(1), logprobs=torch.zeros(1), loss_mask=torch.ones(1), text=t)
        out.append(RewardContext(sample=s, trajectory=tr, candidates=EMO, expected="E"))
    return out


def test_rewards_components_and_total():
    texts = [resp(["sadness", "fear", "gloom"]), resp(["joy", "surprise"], choice="E"), "garbage"]
    specs = [RewardSpec("dspo_accuracy", 1.0), RewardSpec("dspo_format", 0.1), RewardSpec("dspo_div", 0.3),
             RewardSpec("dspo_evidence", 0.0)]
    comps, total = compute_rewards(specs, ctx_of(texts))
    assert comps["dspo_accuracy"] == [1.0, 1.0, 0.0]  # text match, letter match (E = sadness), malformed
    assert comps["dspo_format"] == [1.0, 1.0, 0.0] and comps["dspo_format/missing_step"] == [0.0, 0.0, 1.0]
    lex = builtin_lexicon()
    prior = sample_prior(lex, {}, "sadness")
    z = torch.tensor([BUILTIN_VAD[c] for c in ("sadness", "fear", "gloom")], dtype=torch.float64)
    d_all, delta = dedr_terms(z, prior.mu, prior.sigma)
    t = torch.exp(-d_all ** 2 / 2) * (1 - torch.exp(-delta.clamp(min=-1.0)))
    assert comps["dspo_div"][0] == pytest.approx(float(t.mean()), abs=1e-9)
    assert [comps[f"dspo_div/t{j}"][0] for j in range(3)] == pytest.approx(t.tolist(), abs=1e-9)
    assert comps["dspo_div/t3"][0] == 0.0 and comps["dspo_div"][2] == 0.0
    # IoU of (0.1,0.2,0.5,0.6) with the evidence (0.1,0.2,0.5,0.6) (x 20..60, y 10..50 of 100) = 1
    assert comps["dspo_evidence"][0] == pytest.approx(1.0) and comps["dspo_evidence/mask_area"][0] == pytest.approx(0.16)
    assert total[0] == pytest.approx(1.0 + 0.1 + 0.3 * comps["dspo_div"][0], abs=1e-9)


def test_div_prefers_candidates_around_the_prior():
    near = resp(["sadness", "gloom", "grief"])
    far = resp(["joy", "excitement", "delight"], choice="joy")
    comps, _ = compute_rewards([RewardSpec("dspo_div", 1.0)], ctx_of([near, far]))
    assert comps["dspo_div"][0] > comps["dspo_div"][1]
    comps, _ = compute_rewards([RewardSpec("dspo_div", 1.0)], ctx_of([resp(["sadness", "qqqqzzz"])]))
    assert comps["dspo_div"] == [0.0] and comps["dspo_div/unresolved"] == [1.0]
    comps, _ = compute_rewards([RewardSpec("dspo_div", 1.0)], ctx_of([resp(["saddest", "fears", "gloom"])]))
    assert comps["dspo_div/oov_fallback"] == [2.0] and comps["dspo_div"][0] != 0.0


def test_div_is_zero_for_a_well_formed_response_with_one_candidate():
    """DEDR's leave-one-out centroid needs K >= 2: one (resolvable) candidate gives R_div = 0 and no per-candidate
    term, and is not counted as unresolved; the two-candidate row beside it is scored."""
    comps, _ = compute_rewards([RewardSpec("dspo_div", 1.0), RewardSpec("dspo_format", 0.0)],
                               ctx_of([resp(["sadness"]), resp(["sadness", "fear"])]))
    assert comps["dspo_format"] == [1.0, 1.0]  # both parse: the bound, not the parser, decides
    assert comps["dspo_div"][0] == 0.0 and comps["dspo_div/unresolved"] == [0.0, 0.0]
    assert [comps[f"dspo_div/t{j}"][0] for j in range(8)] == [0.0] * 8
    assert comps["dspo_div"][1] != 0.0 and comps["dspo_div/t1"][1] != 0.0


def test_spec_config_and_needs(tiny_model_path):
    with pytest.raises(ConfigError, match="tokenizer"):
        build_spec("dspo", {}, LossParams())
    with pytest.raises(ConfigError, match="algorithm.params.bogus"):
        build_spec("dspo", {"cvig": False, "bogus": 1}, LossParams())
    with pytest.raises(ConfigError, match="algorithm.params.intervention' applies to algorithm.params.mask: pixel"):
        build_spec("dspo", {"tokenizer": tiny_model_path, "intervention": "gray"}, LossParams())
    with pytest.raises((ConfigError, ValueError), match="mask"):
        build_spec("dspo", {"tokenizer": tiny_model_path, "mask": "noise"}, LossParams())
    assert build_spec("dspo", {"cvig": False}, LossParams()).needs().rescore == {}
    s = build_spec("dspo", {"tokenizer": tiny_model_path}, LossParams())
    assert set(s.needs().rescore) == {"cvig", "cvig_orig"}
    cf = s.needs().rescore["cvig"]  # default: zero the visual tokens in each response's own box
    assert cf.transform == "identity" and cf.feature_box(resp(["joy", "fear"])) == (0.1, 0.2, 0.5, 0.6)
    assert cf.feature_box("garbage") is None and s.needs().rescore["cvig_orig"].feature_box is None
    px = build_spec("dspo", {"tokenizer": tiny_model_path, "mask": "pixel"}, LossParams()).needs().rescore["cvig"]
    assert px.transform == "occlude_box" and px.feature_box is None
    s2 = build_spec("dspo", {"tokenizer": tiny_model_path, "p_source": "sampling"}, LossParams())
    assert set(s2.needs().rescore) == {"cvig"}


def test_div_weight_from_the_reward_config(tmp_path):
    from support import REPO

    from mmrl.algos.spec import build_algorithm
    from mmrl.config import load_config

    yaml = [str(REPO / "configs" / "dspo_mood.yaml")]
    cfg = load_config(yaml, ["rewards.2.weight=0.7"])
    assert build_algorithm(cfg.algorithm, cfg).params.div_weight == 0.7  # derived, not a second number to keep equal
    assert load_config(yaml, ["rewards.2.weight=0.0", "algorithm.params.div_weight=0.0"])  # consistent: accepted
    with pytest.raises(ConfigError, match=r"'algorithm.params.div_weight' = 0.3 differs from 'rewards.2.weight' "
                                          r"\(dspo_div\) = 0.0"):
        load_config(yaml, ["rewards.2.weight=0.0", "algorithm.params.div_weight=0.3"])
    with pytest.raises(ConfigError, match="needs the reward 'dspo_evidence'"):
        load_config(yaml, ["algorithm.params.mask=pixel", "rewards=[{name: dspo_accuracy}, {name: dspo_div}]"])
    with pytest.raises(ConfigError, match="div_weight' is unset"):  # built without a run config and not given
        build_spec("dspo", {"cvig": True, "tokenizer": "tiny"}, LossParams()).advantages(_batch(["garbage"])[0])


def _batch(texts, tok=None, area=0.25):
    """A step batch of ``texts`` (token ids from ``tok``, or one zero token each) with hand-set re-scored log-probs:
    every token 0 except the first token of candidate k of text 0: p = [.5, .3, .2], p_cf = [.1, .3, .25]."""
    ids = [torch.tensor(tok(t, add_special_tokens=False)["input_ids"]) if tok else torch.zeros(1, dtype=torch.long)
           for t in texts]
    lp, lp_cf = [torch.zeros(len(i)) for i in ids], [torch.zeros(len(i)) for i in ids]
    terms = [0.2, -0.1, 0.4]
    if tok is not None:
        assert tok.decode(ids[0].tolist(), skip_special_tokens=True) == texts[0]
        offs = token_offsets(tok, ids[0].tolist(), len(texts[0]))
        for c, p, pc in zip(("sadness", "fear", "gloom"), (0.5, 0.3, 0.2), (0.1, 0.3, 0.25)):
            st = texts[0].index(c)
            lo = [i for i, (a, b) in enumerate(offs) if a < st + len(c) and b > st][0]
            lp[0][lo], lp_cf[0][lo] = math.log(p), math.log(pc)
    comps = {"dspo_evidence/mask_area": torch.tensor([area] + [0.0] * (len(texts) - 1))}
    for j in range(4):
        comps[f"dspo_div/t{j}"] = torch.tensor([terms[j] if j < 3 else 0.0] + [0.0] * (len(texts) - 1))
    batch = StepBatch(rewards=torch.tensor([1.5] + [0.0] * (len(texts) - 1)), components=comps,
                      groups={"prompt": torch.zeros(len(texts), dtype=torch.long)}, roles=["anchor"] * len(texts),
                      views=["original"] * len(texts), lengths=torch.tensor([len(i) for i in ids]), response_ids=ids,
                      texts=texts, logprobs=[torch.zeros(len(i)) for i in ids],
                      rescored={"cvig_orig": lp, "cvig": lp_cf})
    return batch, terms


def _want(area, terms):
    dp = torch.tensor([0.5 - 0.1, 0.0, 0.2 - 0.25]) * (1 - area)
    w = torch.softmax(dp / 0.1, 0)
    return 1.5 + 0.1 * float(dp.mean()) + 0.3 * (float((w * torch.tensor(terms)).sum()) - sum(terms) / 3)


def test_cvig_shapes_reward(tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    texts = [resp(["sadness", "fear", "gloom"]), "garbage"]
    batch, terms = _batch(texts, tok)
    comps = batch.components
    # pixel masking: the evidence box's area (0.25) enters Delta P -> the spec's vector 2
    spec = build_spec("dspo", {"tokenizer": tiny_model_path, "mask": "pixel", "div_weight": 0.3}, LossParams())
    out = spec.advantages(batch)
    w = torch.tensor([0.9225, 0.0459, 0.0316])  # spec vector 2
    want = 1.5 + 0.1 * 0.0875 + 0.3 * (float((w * torch.tensor(terms)).sum()) - sum(terms) / 3)
    assert float(out.rewards[0]) == pytest.approx(want, abs=1e-4) == pytest.approx(_want(0.25, terms), abs=1e-4)
    assert float(out.rewards[1]) == 0.0  # malformed: unchanged
    assert out.metrics["cvig/scored_frac"] == 0.5 and "cvig/no_box_frac" not in out.metrics
    assert float(out.advantages[0]) > 0 > float(out.advantages[1])
    # feature masking (default): the area is the response's own box (0.4 x 0.4), not the evidence box
    feat = build_spec("dspo", {"tokenizer": tiny_model_path, "div_weight": 0.3}, LossParams())
    batch.rescored["cvig"][1] = torch.full_like(batch.rescored["cvig"][1], float("nan"))  # no box: not re-scored
    fo = feat.advantages(batch)
    assert float(fo.rewards[0]) == pytest.approx(_want(0.16, terms), abs=1e-6) and float(fo.rewards[1]) == 0.0
    assert fo.metrics["cvig/no_box_frac"] == 0.5 and fo.metrics["cvig/scored_frac"] == 0.5
    del comps["dspo_evidence/mask_area"]
    assert float(feat.advantages(batch).rewards[0]) == pytest.approx(_want(0.16, terms), abs=1e-6)  # not needed
    comps["dspo_evidence/mask_area"] = torch.tensor([0.25, 0.0])
    # the ablation without CVIG leaves the reward as the rewards gave it
    plain = build_spec("dspo", {"cvig": False}, LossParams()).advantages(batch)
    assert torch.allclose(plain.rewards, batch.rewards)
    # a response the format reward zeroed (e.g. truncated) gets no CVIG term even when its text parses
    comps["dspo_format"] = torch.tensor([0.0, 0.0])
    assert torch.allclose(spec.advantages(batch).rewards, batch.rewards)
    del comps["dspo_evidence/mask_area"]
    with pytest.raises(ConfigError, match="dspo_evidence"):
        spec.advantages(batch)


def _evidence_ctx(text, source_size, size=None, box=(20.0, 10.0, 60.0, 50.0)):
    s = Sample(id="wide", question="q", candidates=EMO, answer="sadness",
               evidence=Evidence(boxes=[(0.0, list(box))], source_size=source_size))
    tr = Trajectory(sample_id="wide", group_id=0, view="original", role="anchor", prompt_ids=torch.zeros(1),
                    response_ids=torch.zeros(1), logprobs=torch.zeros(1), loss_mask=torch.ones(1), text=text)
    return RewardContext(sample=s, trajectory=tr, candidates=EMO, media_info={"size": size} if size else {})


# the evidence box [x0 20, y0 10, x1 60, y1 50] px on non-square images, as (ymin, xmin, ymax, xmax) fractions
WIDE = [
    ((200, 100), None, (0.1, 0.1, 0.5, 0.3)),  # 200 wide, 100 high
    ((100, 200), None, (0.05, 0.2, 0.25, 0.6)),  # 100 wide, 200 high
    (None, (400, 100), (0.1, 0.05, 0.5, 0.15)),  # no source_size: the decoded media's (width, height)
    ((200, 100), (400, 50), (0.1, 0.1, 0.5, 0.3)),  # source_size wins over the media's size
]


@pytest.mark.parametrize("source_size,size,want", WIDE, ids=[str(i) for i in range(len(WIDE))])
def test_evidence_box_is_normalised_by_width_and_height_on_non_square_images(source_size, size, want):
    from mmrl.rewards.dspo_rewards import evidence_box

    c = _evidence_ctx("", source_size, size)
    assert evidence_box(c.sample, size) == pytest.approx(want)
    # a response whose step-1 box is exactly that box: IoU 1 and the box's area
    text = resp(["sadness", "fear"], box=", ".join(f"{v:g}" for v in want))
    out = REWARDS.get("dspo_evidence")([_evidence_ctx(text, source_size, size)])
    assert out["dspo_evidence"] == [pytest.approx(1.0)]
    assert out["dspo_evidence/mask_area"] == [pytest.approx((want[2] - want[0]) * (want[3] - want[1]))]


def test_a_response_with_fewer_than_two_candidates_gets_no_counterfactual_term(tiny_model_path):
    """R_cf and the CVIG re-weighting need K >= 2 candidates: a one-candidate response keeps its reward even when
    its candidate's probability drops under the intervention, and is not counted as scored."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    texts = [resp(["sadness"]), resp(["sadness", "fear"])]
    ids = [torch.tensor(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    lp, lp_cf = [torch.zeros(len(i)) for i in ids], [torch.zeros(len(i)) for i in ids]
    for row, text in enumerate(texts):  # p(sadness) = 0.5 as sampled, 0.1 under the intervention
        offs = token_offsets(tok, ids[row].tolist(), len(text))
        st = text.index("sadness", text.index("<step3>"))
        first = [i for i, (a, b) in enumerate(offs) if a < st + 7 and b > st][0]
        lp[row][first], lp_cf[row][first] = math.log(0.5), math.log(0.1)
    comps = {"dspo_evidence/mask_area": torch.tensor([0.25, 0.25]), "dspo_div/t0": torch.tensor([0.2, 0.2]),
             "dspo_div/t1": torch.tensor([0.0, -0.1])}
    batch = StepBatch(rewards=torch.tensor([1.0, 1.0]), components=comps, groups={"prompt": torch.zeros(2, dtype=torch.long)},
                      roles=["anchor"] * 2, views=["original"] * 2, lengths=torch.tensor([len(i) for i in ids]),
                      response_ids=ids, texts=texts, logprobs=[torch.zeros(len(i)) for i in ids],
                      rescored={"cvig_orig": lp, "cvig": lp_cf})
    spec = build_spec("dspo", {"tokenizer": tiny_model_path, "mask": "pixel", "div_weight": 0.3}, LossParams())
    out = spec.advantages(batch)
    assert float(out.rewards[0]) == 1.0  # K = 1: unchanged
    dp = torch.tensor([(0.5 - 0.1) * 0.75, 0.0])  # K = 2: R_cf = mean ΔP, w = softmax(ΔP / 0.1)
    w = torch.softmax(dp / 0.1, 0)
    want = 1.0 + 0.1 * float(dp.mean()) + 0.3 * (float((w * torch.tensor([0.2, -0.1])).sum()) - 0.05)
    assert float(out.rewards[1]) == pytest.approx(want, abs=1e-5)
    assert out.metrics["cvig/scored_frac"] == 0.5 and out.metrics["cvig/r_cf"] == pytest.approx(float(dp.mean()) / 2)
