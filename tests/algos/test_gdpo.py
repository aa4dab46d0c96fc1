"""GDPO (NVlabs/GDPO TRL version) and the Stream-GDPO reading of it (specs/algorithms.md §5)."""
import pytest
import torch

from mmrl.algos.spec import estimate
from mmrl.algos import AdvantageInputs, gdpo_advantages, grpo_advantages

C = torch.tensor([1.0, 1.0, 0.0, 0.0])
F = torch.tensor([1.0, 0.0, 1.0, 1.0])
G0 = torch.zeros(4, dtype=torch.long)


def test_grpo_on_sum_collapses():
    a = grpo_advantages(C + F, G0, eps=1e-4)
    assert torch.allclose(a, torch.tensor([1.5, -0.5, -0.5, -0.5]), atol=1e-3)
    assert a[1] == a[2] == a[3]


def test_spec_vector_pre_and_post_batch_norm():
    pre = gdpo_advantages({"c": C, "f": F}, G0, batch_norm=False)
    assert torch.allclose(pre, torch.tensor([1.366, -0.634, -0.366, -0.366]), atol=1e-3)
    post = gdpo_advantages({"c": C, "f": F}, G0)
    assert torch.allclose(post, torch.tensor([1.486, -0.689, -0.398, -0.398]), atol=1e-3)
    assert post[1] != post[2]  # rollout 2 no longer collapses with 3/4


def test_eps_is_1e4_by_default():
    pre = gdpo_advantages({"c": C}, G0, batch_norm=False)
    assert pre[0].item() == pytest.approx(0.5 / (0.5773503 + 1e-4), abs=1e-6)


def test_stream_gdpo_vector_no_batch_norm():
    comps = {
        "out": torch.tensor([1.0, 0.5, 0.5, 0.0]),
        "fmt": torch.tensor([1.0, 1.0, 1.0, 0.0]),
        "tool": torch.tensor([1.0, 0.0, 0.0, 0.0]),
        "mem": torch.tensor([0.2, 0.1, 0.0, -0.1]),
    }
    a = gdpo_advantages(comps, G0, weights={"tool": 0.5, "mem": 0.5}, batch_norm=False)
    assert torch.allclose(a, torch.tensor([3.055, 0.443, 0.056, -3.555]), atol=1e-3)


def test_zero_variance_component_contributes_zero():
    base = gdpo_advantages({"c": C, "f": F}, G0, batch_norm=False)
    with_const = gdpo_advantages({"c": C, "f": F, "k": torch.full((4,), 0.3)}, G0, batch_norm=False)
    assert torch.equal(base, with_const)


def test_groups_normalise_independently():
    gid = torch.tensor([5, 5, 5, 5, 2, 2, 2, 2])
    c2 = torch.cat([C, torch.tensor([0.0, 1.0, 1.0, 1.0])])
    f2 = torch.cat([F, torch.tensor([1.0, 1.0, 0.0, 0.0])])
    a = gdpo_advantages({"c": c2, "f": f2}, gid, batch_norm=False)
    assert torch.allclose(a[:4], gdpo_advantages({"c": C, "f": F}, G0, batch_norm=False))
    assert torch.allclose(a[4:], gdpo_advantages({"c": c2[4:], "f": f2[4:]}, G0, batch_norm=False))


def test_weights_validation_and_zero_weight():
    with pytest.raises(ValueError, match="unknown components"):
        gdpo_advantages({"c": C}, G0, weights={"fmt": 1.0})
    only_c = gdpo_advantages({"c": C, "f": F}, G0, weights={"f": 0.0}, batch_norm=False)
    assert torch.allclose(only_c, gdpo_advantages({"c": C}, G0, batch_norm=False))


def test_registered_gdpo():
    inp = AdvantageInputs(rewards=C + F, group_ids=G0, components={"c": C, "f": F})
    out = estimate("gdpo", inp)
    assert torch.allclose(out.advantages, torch.tensor([1.486, -0.689, -0.398, -0.398]), atol=1e-3)
    out = estimate("gdpo", inp, batch_norm=False)
    assert torch.allclose(out.advantages, torch.tensor([1.366, -0.634, -0.366, -0.366]), atol=1e-3)
    # without components GDPO falls back to the total reward
    out = estimate("gdpo", AdvantageInputs(rewards=C + F, group_ids=G0), batch_norm=False)
    assert torch.allclose(out.advantages, torch.tensor([1.5, -0.5, -0.5, -0.5]), atol=1e-3)


# two prompts of three rollouts: group 0 c = [1, 0, 0], f = [1, 1, 0]; group 1 c = [1, 1, 0], f = [0, 0, 0].
# Per group: Â_c(g0) = [1.15450, -0.57725, -0.57725], Â_f(g0) = [0.57725, 0.57725, -1.15450] (std 0.57735 + 1e-4),
# Â_c(g1) = [0.57725, 0.57725, -1.15450], Â_f(g1) = 0. The batch step whitens the six sums together (mean 0,
# unbiased std 1.26469), so group 1's best rollout stays below group 0's.
C2 = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
F2 = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
G2 = torch.tensor([0, 0, 0, 1, 1, 1])
SEVERAL_GROUPS = [
    ({}, True, [1.73175, 0.0, -1.73175, 0.57725, 0.57725, -1.1545], [1.3692, 0.0, -1.3692, 0.4564, 0.4564, -0.9128]),
    ({"f": 2.0}, True, [2.309, 0.57725, -2.88625, 0.57725, 0.57725, -1.1545],
     [1.2909, 0.3227, -1.6137, 0.3227, 0.3227, -0.6455]),
]


@pytest.mark.parametrize("weights,batch_norm,pre,post", SEVERAL_GROUPS, ids=["w1", "wf2"])
def test_batch_renormalisation_runs_over_the_whole_batch_of_several_groups(weights, batch_norm, pre, post):
    got_pre = gdpo_advantages({"c": C2, "f": F2}, G2, weights=weights, batch_norm=False)
    assert got_pre.tolist() == pytest.approx(pre, abs=1e-4)
    got = gdpo_advantages({"c": C2, "f": F2}, G2, weights=weights, batch_norm=batch_norm)
    assert got.tolist() == pytest.approx(post, abs=1e-4)
    # whitened over the batch: unit std over all six, not within each group (group 0 alone would be [1, 0, -1])
    assert float(got.std()) == pytest.approx(1.0, abs=1e-3) and float(got[:3].std()) > 1.3
    # group ids are labels: renumbering them changes nothing
    assert torch.allclose(gdpo_advantages({"c": C2, "f": F2}, G2 * 7 + 3, weights=weights), got)


def test_the_registered_gdpo_spec_reports_rewards_metrics_and_takes_its_params():
    from mmrl.algos import AdvantageInputs

    r = C2 + 2 * F2
    inp = AdvantageInputs(rewards=r, group_ids=G2, components={"c": C2, "f": F2})
    out = estimate("gdpo", inp, component_weights={"f": 2.0})
    assert out.advantages.tolist() == pytest.approx(SEVERAL_GROUPS[1][3], abs=1e-4)  # the weights reach the estimate
    assert torch.equal(out.rewards, r)
    assert out.metrics["component/c_mean"] == pytest.approx(0.5) and out.metrics["component/f_mean"] == pytest.approx(1 / 3)
    assert out.metrics["reward_mean"] == pytest.approx(float(r.mean()))
    no_batch = estimate("gdpo", inp, batch_norm=False, eps=0.5)  # eps reaches the per-group step
    want = gdpo_advantages({"c": C2, "f": F2}, G2, eps=0.5, batch_norm=False)
    assert torch.allclose(no_batch.advantages, want) and not torch.allclose(want, gdpo_advantages({"c": C2, "f": F2}, G2, batch_norm=False))
    # without components GDPO normalises the total reward, reported as the component "reward"
    plain = estimate("gdpo", AdvantageInputs(rewards=r, group_ids=G2))
    assert set(k for k in plain.metrics if k.startswith("component/")) == {"component/reward_mean"}
    assert torch.allclose(plain.advantages, gdpo_advantages({"reward": r}, G2))


def test_a_zero_weight_skips_only_its_component_and_batch_eps_is_its_own():
    first_zero = gdpo_advantages({"f": F2, "c": C2}, G2, weights={"f": 0.0}, batch_norm=False)
    assert torch.allclose(first_zero, gdpo_advantages({"c": C2}, G2, batch_norm=False))  # c still counts after f
    with pytest.raises(ValueError, match="^gdpo needs at least one reward component$"):
        gdpo_advantages({}, G2)
    # the batch step's eps: batch_eps when given, else eps
    pre = gdpo_advantages({"c": C2, "f": F2}, G2, batch_norm=False)
    want = (pre - pre.mean()) / (pre.std() + 0.7)
    got = gdpo_advantages({"c": C2, "f": F2}, G2, batch_eps=0.7)
    assert torch.allclose(got, want.to(got.dtype), atol=1e-5)


def test_gdpo_on_an_empty_batch():
    from mmrl.algos import AdvantageInputs

    out = estimate("gdpo", AdvantageInputs(rewards=torch.zeros(0), group_ids=torch.zeros(0, dtype=torch.long),
                                           components={"c": torch.zeros(0)}))
    assert out.advantages.shape == (0,) and out.metrics["component/c_mean"] == 0.0
