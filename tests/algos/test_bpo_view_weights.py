"""A view's ``weight`` scales its responses' BPO advantage (b_q and σ_B unweighted) and its pack-score share."""
import torch

from mmrl.algos.base import ADVANTAGES, AdvantageInputs, AlgoParams
from mmrl.algos.bpo import bpo_advantages


def test_view_weight_scales_the_advantage_and_the_pack_score():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    g = torch.zeros(6, dtype=torch.long)
    roles = ["anchor", "anchor", "stable", "stable", "abstain", "abstain"]
    packs = torch.tensor([0, 1, 0, 1, 0, 1])
    w = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.5, 0.5], dtype=torch.float64)
    plain = ADVANTAGES.get("bpo")(AdvantageInputs(r, g, roles=roles, pack_ids=packs), AlgoParams())
    weighted = ADVANTAGES.get("bpo")(AdvantageInputs(r, g, roles=roles, pack_ids=packs, view_weights=w), AlgoParams())
    assert torch.allclose(plain.advantages, bpo_advantages(r, g, roles, packs))
    assert torch.allclose(weighted.advantages, plain.advantages * w.float())
    # pack 0: (1 + 1 + 0.5*1) / 2.5 = 1; pack 1: (0 + 1 + 0.5*0) / 2.5 = 0.4 -> mean 0.7 (unweighted: 1 and 1/3 -> 2/3)
    assert abs(weighted.metrics["bpo/pack_score_mean"] - 0.7) < 1e-6
    assert abs(plain.metrics["bpo/pack_score_mean"] - 2 / 3) < 1e-6
