"""The vppo and pacg specs on hand-built step batches (character-level "tokenizer": one token per character)."""
import math

import pytest
import torch

from mmrl.algos.base import LossParams
from mmrl.algos.spec import StepBatch, build_spec
from mmrl.algos.vppo import ORIGINAL_KEY
from mmrl.algos.vppo_core import vppo_token_advantages
from mmrl.errors import ConfigError

PATCH = "patch_mask|p=0.5|patch=14|value=0"


def decode(ids):
    return "".join(chr(i) for i in ids)


def make_batch(texts, rewards, groups, claim_p=None, accuracy=None):
    """Sampling log-probs 0; re-scored log-probs log(P) on every character of the sentence holding a marker
    ``[k]`` (claim k gets ``claim_p[k]``), 0 elsewhere. So each claim's persistence is exactly its P."""
    ids, inter = [], []
    for text in texts:
        r = torch.tensor([ord(c) for c in text])
        lp = torch.zeros(len(text))
        for k, p in enumerate(claim_p or []):
            at = text.find(f"[{k}]")
            if at >= 0:
                a = max(text.rfind("<think>", 0, at) + 7, text.rfind(". ", 0, at) + 2 if text.rfind(". ", 0, at) >= 0 else 0)
                b = text.find(".", at) + 1
                lp[a:b] = math.log(p)
        ids.append(r)
        inter.append(lp)
    n = len(texts)
    b = StepBatch(rewards=torch.tensor(rewards, dtype=torch.float32),
                  components={"accuracy": torch.tensor(accuracy if accuracy is not None else rewards, dtype=torch.float32)},
                  groups={"prompt": torch.tensor(groups), "pack": torch.zeros(n, dtype=torch.long)},
                  roles=["anchor"] * n, views=["original"] * n, lengths=torch.tensor([len(t) for t in texts]),
                  response_ids=ids, texts=list(texts), logprobs=[torch.zeros(len(t)) for t in texts],
                  rescored={PATCH: inter, ORIGINAL_KEY: [torch.zeros(len(t)) for t in texts]})  # trainer = sampler
    b.decode = decode
    return b


TEXTS = ["<think>I see red [0]. I see blue [1].</think>A", "<think>I see red [2].</think>B",
         "<think>I see a box [3].</think>A", "no think at all B"]


def test_pacg_over_grpo_gates_the_flagged_claim_of_a_positive_response():
    spec = build_spec("pacg", {"base": "grpo"}, LossParams())
    assert list(spec.needs().rescore) == [PATCH, ORIGINAL_KEY]
    batch = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.95, 0.3, 0.25])
    base = build_spec("grpo", {}, LossParams()).advantages(batch).advantages
    out = spec.advantages(batch)
    adv = out.advantages
    assert adv.shape == (4, max(len(t) for t in TEXTS))
    t0 = TEXTS[0]
    a, b = t0.index("I see blue"), t0.index("[1].") + 4
    assert adv[0, a:b].tolist() == pytest.approx([base[0].item() * 0.755] * (b - a), abs=2e-3)
    assert adv[0, :a].tolist() == pytest.approx([base[0].item()] * a)  # outside the claim: unchanged
    assert adv[0, b:len(t0)].tolist() == pytest.approx([base[0].item()] * (len(t0) - b))
    for i in (1, 2, 3):  # unflagged claims, negative rows and claim-free rows keep the base advantage
        assert adv[i, : len(TEXTS[i])].tolist() == pytest.approx([base[i].item()] * len(TEXTS[i]))
    assert out.metrics["pacg/claims"] == 4.0 and out.metrics["pacg/flagged_frac"] == 0.25


def test_negative_response_with_the_flagged_claim_is_unchanged():
    spec = build_spec("pacg", {"base": "grpo"}, LossParams())
    batch = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.3, 0.95, 0.25])  # [2] in row 1
    base = build_spec("grpo", {}, LossParams()).advantages(batch).advantages
    out = spec.advantages(batch)
    assert out.metrics["pacg/flagged_frac"] == 0.25 and base[1] < 0
    for i in range(4):
        assert out.advantages[i, : len(TEXTS[i])].tolist() == pytest.approx([base[i].item()] * len(TEXTS[i]))


def test_pacg_over_vppo_shares_the_pass_and_gates_after_vppo_shaping():
    spec = build_spec("pacg", {"base": {"name": "vppo", "params": {"dynamic_sampling": False}}}, LossParams())
    assert list(spec.needs().rescore) == [PATCH, ORIGINAL_KEY]  # one re-scoring pass for both
    batch = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.95, 0.3, 0.25])
    vppo = spec.base.advantages(batch).advantages
    grpo = build_spec("grpo", {}, LossParams()).advantages(batch).advantages
    ref, _, _, _ = vppo_token_advantages(grpo, batch.rescored[PATCH], batch.logprobs, 0.9, 0.4)
    assert torch.allclose(vppo, ref)
    out = spec.advantages(batch).advantages
    changed = (out != vppo)
    assert changed.any() and bool((out[changed] < vppo[changed]).all()) and bool((vppo[changed] > 0).all())
    assert changed.nonzero()[:, 0].unique().tolist() == [0]


def test_vppo_spec_needs_and_ablation_switches():
    spec = build_spec("vppo", {"dynamic_sampling": False}, LossParams())
    iv = spec.needs().rescore[PATCH]
    assert iv.transform == "patch_mask" and iv.params == {"patch": 14, "p": 0.5, "value": 0}
    batch = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.95, 0.3, 0.25])
    out = spec.advantages(batch)
    lengths = batch.lengths
    kept = (out.advantages != 0).sum(1)
    assert kept[:3].tolist() == [math.ceil(0.4 * int(x)) for x in lengths[:3]]
    assert 0 < out.metrics["vppo/token_frac"] < 1 and out.metrics["vppo/scale_max"] > 1
    plain = build_spec("vppo", {"dynamic_sampling": False, "shaping": False, "filtering": False}, LossParams())
    grpo = build_spec("grpo", {}, LossParams()).advantages(batch).advantages
    o2 = plain.advantages(batch).advantages
    for i in range(4):
        assert o2[i, : lengths[i]].tolist() == pytest.approx([grpo[i].item()] * int(lengths[i]))


def test_vppo_tas_statistics_skip_uniform_groups_under_dynamic_sampling():
    spec = build_spec("vppo", {}, LossParams())
    texts = TEXTS + ["<think>I see it [4].</think>A", "<think>I see it.</think>A"]
    batch = make_batch(texts, [1.0, 0.0, 1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1, 2, 2], claim_p=[0.2, 0.95, 0.3, 0.25, 0.01])
    # group 2 is uniform (both right): its very vision-dependent row 4 must not stretch the min-max range
    with_u = spec.advantages(batch).metrics["vppo/scale_max"]
    without = build_spec("vppo", {}, LossParams()).advantages(make_batch(
        TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.95, 0.3, 0.25])).metrics["vppo/scale_max"]
    assert with_u == pytest.approx(without)


def test_config_errors_and_missing_inputs():
    with pytest.raises(ConfigError, match="algorithm.params.kapa"):
        build_spec("pacg", {"base": "dapo", "kapa": 1.0}, LossParams())
    with pytest.raises(ConfigError, match="algorithm.params.base.params.alpha"):
        build_spec("pacg", {"base": {"name": "vppo", "params": {"alpha": 0.8}}}, LossParams())
    with pytest.raises(ConfigError, match="claim_extractor"):
        build_spec("pacg", {"claim_extractor": "nowhere_module:fn"}, LossParams())
    with pytest.raises(ValueError, match="neither a lexicon"):
        build_spec("pacg", {"lexicon": []}, LossParams())
    batch = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1])
    assert build_spec("pacg", {"base": "grpo"}, LossParams()).advantages(batch).metrics["pacg/claims"] == 4.0
    spec = build_spec("pacg", {"base": "grpo", "lexicon": [], "claim_extractor": "tests.algos.test_pacg_spec:_blue"},
                      LossParams())
    assert spec.advantages(batch).metrics["pacg/claims"] == 1.0
    batch.rescored = {}
    with pytest.raises(ValueError, match="re-scored log-probs"):
        spec.advantages(batch)
    del batch.decode
    with pytest.raises(ValueError, match="decode"):
        build_spec("pacg", {"base": "grpo"}, LossParams()).advantages(batch)


def _blue(sentence):
    return "blue" in sentence


def test_gate_statistics_skip_rows_the_base_does_not_train():
    spec = build_spec("pacg", {"base": "dapo"}, LossParams())
    texts = TEXTS + ["<think>I see it [4].</think>A", "<think>I see it [5].</think>A"]
    p = [0.2, 0.95, 0.3, 0.25, 0.9, 0.9]
    batch = make_batch(texts, [1.0, 0.0, 1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1, 2, 2], claim_p=p)
    out = spec.advantages(batch)  # group 2 is uniform: dynamic sampling drops it, its persistent claims do not count
    assert out.metrics["pacg/claims"] == 4.0 and out.metrics["pacg/flagged_frac"] == 0.25
    assert out.advantages[0].min().item() == pytest.approx(0.7071 * 0.755, abs=3e-3)


def test_another_intervention_takes_its_own_params_not_the_patch_defaults():
    # a config dict for full_mask must not be merged into patch_mask's defaults (patch=14, p=0.5)
    for params in ({"intervention": "full_mask"}, {"intervention": "full_mask", "intervention_params": {"value": 0}}):
        pacg = build_spec("pacg", {"base": "dapo", **params}, LossParams())
        (iv,) = [v for k, v in pacg.needs().rescore.items() if k != ORIGINAL_KEY]
        assert iv.transform == "full_mask" and set(iv.params) <= {"value"}
        vppo = build_spec("vppo", params, LossParams())
        assert [(v.transform, dict(v.params)) for v in vppo.needs().rescore.values()] == [(iv.transform, dict(iv.params)),
                                                                                          ("identity", {})]
    # over VPPO with the same full mask: still one shared pass
    both = build_spec("pacg", {"base": {"name": "vppo", "params": {"intervention": "full_mask"}}, "intervention": "full_mask"},
                      LossParams())
    assert len(both.needs().rescore) == 2  # the mask and the unchanged view
    assert list(build_spec("pacg", {"base": "dapo"}, LossParams()).needs().rescore) == [PATCH, ORIGINAL_KEY]  # default unchanged


# P = [0.2, 0.95, 0.3, 0.25] over the batch: mean 0.425, unbiased std 0.352373, z of claim [1] = 1.489901.
# Per prompt group (rows 0-1: claims [0], [1], [2]; rows 2-3: claim [3] alone, std 0): mean 0.48333, std 0.407226,
# z of claim [1] = 1.145983, and claim [3] is never flagged. The gain g = max(γ, 1 − η(z − κ)) on claim [1]:
Z_BATCH, Z_GROUP = 1.489901, 1.145983
GAINS = [
    (dict(gamma=0.6, eta=0.3), 1 - 0.3 * (Z_BATCH - 1)),  # 0.853 (γ and η swapped: 0.706)
    (dict(gamma=0.9, eta=0.5), 0.9),  # the floor binds (swapped: 0.559)
    (dict(gamma=0.2, eta=0.8, kappa=0.5), 1 - 0.8 * (Z_BATCH - 0.5)),  # 0.208 (swapped: 0.406)
    (dict(gamma=0.6, eta=0.3, per_group=True), 1 - 0.3 * (Z_GROUP - 1)),  # 0.956
    (dict(per_group=True), 1 - 0.5 * (Z_GROUP - 1)),  # 0.927 (batch-wide: 0.755)
    (dict(per_group=True, kappa=1.2), 1.0),  # z 1.146 < 1.2: not flagged per group (batch-wide it would be)
]


@pytest.mark.parametrize("params,gain", GAINS, ids=[str(i) for i in range(len(GAINS))])
def test_the_gate_uses_the_configured_floor_slope_and_statistics(params, gain):
    spec = build_spec("pacg", {"base": "grpo", **params}, LossParams())
    batch = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.95, 0.3, 0.25])
    base = build_spec("grpo", {}, LossParams()).advantages(batch).advantages
    out = spec.advantages(batch)
    t0 = TEXTS[0]
    a, b = t0.index("I see blue"), t0.index("[1].") + 4
    assert out.advantages[0, a:b].tolist() == pytest.approx([base[0].item() * gain] * (b - a), abs=2e-3)
    assert out.advantages[0, :a].tolist() == pytest.approx([base[0].item()] * a)
    assert out.metrics["pacg/flagged_frac"] == (0.0 if gain == 1.0 else 0.25)
    if gain != 1.0:
        assert out.metrics["pacg/gain_flagged_mean"] == pytest.approx(gain, abs=2e-3)


def test_pacg_reports_its_metrics_and_passes_the_base_through():
    spec = build_spec("pacg", {"base": "grpo"}, LossParams())
    batch = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.95, 0.3, 0.25])
    base = build_spec("grpo", {}, LossParams()).advantages(batch)
    out = spec.advantages(batch)
    efs = [p - math.log(p) - 1 for p in (0.2, 0.95, 0.3, 0.25)]  # EFS = e^d - d - 1 with d = log P on a claim's tokens
    inter = batch.rescored[PATCH]
    tokens = torch.cat([torch.exp(x) - x - 1 for x in inter])
    assert out.metrics["pacg/claims"] == 4.0 and out.metrics["pacg/responses_with_claims"] == 0.75
    assert out.metrics["pacg/flagged_frac"] == 0.25 and out.metrics["pacg/persistence_mean"] == pytest.approx(0.425)
    assert out.metrics["pacg/efs_claim_mean"] == pytest.approx(sum(efs) / 4, abs=1e-5)
    assert out.metrics["pacg/efs_token_mean"] == pytest.approx(float(tokens.mean()), abs=1e-5)
    assert out.metrics["pacg/gain_flagged_mean"] == pytest.approx(0.755, abs=2e-3)
    assert all(out.metrics[k] == v for k, v in base.metrics.items())  # the base's metrics too
    assert torch.equal(out.rewards, base.rewards)
    assert (out.train_mask is None) == (base.train_mask is None)
    # no claim at all: zeros, a gain of 1
    none = spec.advantages(make_batch(["plain text A", "no think B"], [1.0, 0.0], [0, 0]))
    assert [none.metrics[k] for k in ("pacg/claims", "pacg/responses_with_claims", "pacg/flagged_frac",
                                      "pacg/persistence_mean", "pacg/efs_claim_mean", "pacg/efs_token_mean",
                                      "pacg/gain_flagged_mean")] == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    # quantile mode takes q: q = 0.5 flags the top half of the four claims (0.95 and 0.3)
    half = build_spec("pacg", {"base": "grpo", "mode": "quantile", "q": 0.5}, LossParams()).advantages(batch)
    assert half.metrics["pacg/flagged_frac"] == 0.5


def test_pacg_keeps_the_bases_old_and_ref_needs():
    from mmrl.algos.spec import ALGORITHMS, AlgorithmSpec, Needs, register_algorithm

    if "test_needy" not in ALGORITHMS:
        @register_algorithm("test_needy")
        class Needy(AlgorithmSpec):
            def needs(self):
                return Needs(old=True, ref=True)

    n = build_spec("pacg", {"base": "test_needy"}, LossParams()).needs()
    assert n.old is True and n.ref is True and list(n.rescore) == [PATCH, ORIGINAL_KEY]
    g = build_spec("pacg", {"base": "grpo"}, LossParams()).needs()
    assert g.old is False and g.ref is False
