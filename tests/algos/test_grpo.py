"""GRPO / Dr.GRPO advantages (specs/algorithms.md §7) and the advantage registry."""
import math

import pytest
import torch

from mmrl.algos.spec import estimate
from mmrl.algos import AdvantageInputs, drgrpo_advantages, grpo_advantages

R = torch.tensor([1.0, 0.0, 0.0, 1.0])
G0 = torch.zeros(4, dtype=torch.long)


def test_spec_vector_unbiased_vs_population():
    a = grpo_advantages(R, G0, unbiased=True, eps=0.0)
    assert torch.allclose(a, torch.tensor([0.8660254, -0.8660254, -0.8660254, 0.8660254]), atol=1e-6)
    p = grpo_advantages(R, G0, unbiased=False, eps=0.0)
    assert torch.allclose(p, torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-6)


def test_eps_enters_denominator():
    a = grpo_advantages(R, G0, unbiased=True, eps=1e-2)
    assert a[0].item() == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-2), abs=1e-6)


def test_drgrpo_spec_vector():
    a = drgrpo_advantages(R, G0)
    assert torch.allclose(a, torch.tensor([0.5, -0.5, -0.5, 0.5]), atol=1e-7)
    assert torch.equal(grpo_advantages(R, G0, std_scale="none"), a)


def test_arbitrary_ids_unordered_unequal_groups():
    r = torch.tensor([1.0, 2.0, 0.0, 4.0, 0.0, 1.0, 5.0])
    gid = torch.tensor([7, 3, 7, 3, 3, 7, 9])
    a = grpo_advantages(r, gid, eps=0.0)
    # group 7: [1, 0, 1] mean 2/3, unbiased std sqrt(1/3)
    s7 = math.sqrt(((1 / 3) ** 2 * 2 + (2 / 3) ** 2) / 2)
    # group 3: [2, 4, 0] mean 2, unbiased std 2
    exp = torch.tensor([(1 - 2 / 3) / s7, 0.0, (0 - 2 / 3) / s7, 1.0, -1.0, (1 - 2 / 3) / s7, 0.0])
    assert torch.allclose(a, exp, atol=1e-6)
    assert a[6].item() == 0.0  # single-member group


@pytest.mark.parametrize("unbiased", [True, False])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_constant_and_singleton_groups_are_exactly_zero(unbiased, scale):
    r = torch.tensor([0.1, 0.1, 0.1, 0.7, 1.0, 0.0])
    gid = torch.tensor([0, 0, 0, 1, 2, 2])
    a = grpo_advantages(r, gid, std_scale=scale, unbiased=unbiased, eps=0.0)
    assert not torch.isnan(a).any()
    assert torch.all(a[:4] == 0.0)
    assert a[4] > 0 and a[5] < 0


def test_batch_std_scale():
    r = torch.tensor([1.0, 0, 0, 1, 1, 1, 1, 0])
    gid = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    a = grpo_advantages(r, gid, std_scale="batch", eps=0.0)
    s = math.sqrt(1.875 / 7)  # unbiased std of all 8 rewards (mean 5/8)
    exp = torch.tensor([0.5, -0.5, -0.5, 0.5, 0.25, 0.25, 0.25, -0.75]) / s
    assert torch.allclose(a, exp, atol=1e-6)
    assert a[0].item() == pytest.approx(0.96609, abs=1e-4)


def test_dtype_and_validation():
    assert grpo_advantages(R.double(), G0).dtype == torch.float64
    assert grpo_advantages(torch.tensor([1, 0]), torch.tensor([0, 0])).dtype == torch.float32
    with pytest.raises(ValueError, match="std_scale"):
        grpo_advantages(R, G0, std_scale="prompt")
    with pytest.raises(ValueError, match="entries"):
        grpo_advantages(R, torch.zeros(3, dtype=torch.long))


def test_registered_adapters():
    inp = AdvantageInputs(rewards=R, group_ids=G0)
    out = estimate("grpo", inp, unbiased_std=False, eps=0.0)
    assert torch.allclose(out.advantages, torch.tensor([1.0, -1.0, -1.0, 1.0]))
    assert out.train_mask is None
    out = estimate("drgrpo", inp)
    assert torch.allclose(out.advantages, torch.tensor([0.5, -0.5, -0.5, 0.5]))
    for name in ("dapo", "gspo"):  # both use the GRPO advantage
        o = estimate(name, inp, eps=0.0)
        assert torch.allclose(o.advantages, torch.tensor([0.8660254, -0.8660254, -0.8660254, 0.8660254]), atol=1e-6)


def test_unknown_algorithm_lists_known_names():
    from mmrl.algos.spec import build_spec
    from mmrl.errors import ConfigError

    with pytest.raises(ConfigError, match="algorithm.name") as e:
        build_spec("grpoo", {}, None)
    msg = str(e.value)
    for name in ("bpo", "dapo", "drgrpo", "gdpo", "grpo", "tgrpo"):
        assert name in msg
