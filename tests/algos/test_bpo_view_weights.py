"""A view's ``weight`` scales its responses' BPO advantage (b_q and σ_B unweighted) and its pack-score share, and
the trainer carries it from the view set to the estimator."""
import torch

from mmrl.algos.base import AdvantageInputs
from mmrl.algos.bpo import BPOParams, bpo, bpo_advantages


def test_view_weight_scales_the_advantage_and_the_pack_score():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    g = torch.zeros(6, dtype=torch.long)
    roles = ["anchor", "anchor", "stable", "stable", "abstain", "abstain"]
    packs = torch.tensor([0, 1, 0, 1, 0, 1])
    w = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.5, 0.5], dtype=torch.float64)
    plain = bpo(AdvantageInputs(r, g, roles=roles, pack_ids=packs), BPOParams())
    weighted = bpo(AdvantageInputs(r, g, roles=roles, pack_ids=packs, view_weights=w), BPOParams())
    assert torch.allclose(plain.advantages, bpo_advantages(r, g, roles, packs))
    assert torch.allclose(weighted.advantages, plain.advantages * w.float())
    # pack 0: (1 + 1 + 0.5*1) / 2.5 = 1; pack 1: (0 + 1 + 0.5*0) / 2.5 = 0.4 -> mean 0.7 (unweighted: 1 and 1/3 -> 2/3)
    assert abs(weighted.metrics["bpo/pack_score_mean"] - 0.7) < 1e-6
    assert abs(plain.metrics["bpo/pack_score_mean"] - 2 / 3) < 1e-6


def test_trainer_carries_the_view_weight_from_the_view_set_to_the_estimator():
    """RLTrainer.rewards copies each view's weight onto its trajectories, gather_batch puts them in the StepBatch
    and the BPO spec's advantage inputs hand them to the estimator: a weight-0 view trains nothing."""
    from types import SimpleNamespace

    from mmrl.algos.grpo import advantage_inputs
    from mmrl.data.schema import Media, Sample, Trajectory, View
    from mmrl.rewards.base import RewardSpec
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.train.step import gather_batch

    s = Sample(id="s", question="?", candidates=["x", "y", "cannot be determined"], answer="x")
    media = Media("s", frames=torch.zeros(2, 3, 4, 4, dtype=torch.uint8), timestamps=[0.0, 0.5])
    views = {("s", "original"): View("original", "anchor", media, "A"),
             ("s", "blank"): View("blank", "abstain", media, "abstain", weight=0.0)}
    z = torch.zeros(1, dtype=torch.long)
    trajs = [Trajectory("s", 0, v, role, z, z, torch.zeros(1), torch.ones(1, dtype=torch.bool), text, pack_id=p,
                        expected=exp)
             for v, role, text, exp, p in [("original", "anchor", "A", "A", 0), ("original", "anchor", "B", "A", 1),
                                           ("blank", "abstain", "C", "abstain", 0), ("blank", "abstain", "A", "abstain", 1)]]
    si = SimpleNamespace(views=views, media={"s": media}, samples={"s": s},
                         candidates={k: s.candidates for k in views})
    backend = SimpleNamespace(gather=lambda obj: [obj], rank=0, world_size=1)
    fake = SimpleNamespace(reward_specs=[RewardSpec("bpo_contract", 1.0, {"fmt_weight": 0.0})], backend=backend,
                           step=0, stream=SimpleNamespace(epoch=0), cfg=SimpleNamespace(train=SimpleNamespace(prompts_per_step=1)))
    comps, total = RLTrainer.rewards(fake, si, trajs)
    assert [t.view_weight for t in trajs] == [1.0, 1.0, 0.0, 0.0]
    batch, _ = gather_batch(fake, trajs, comps, total)
    out = bpo(advantage_inputs(batch), BPOParams())
    assert out.advantages[2:].abs().sum() == 0 and out.advantages[:2].abs().sum() > 0


def _weighted_viewset(tmp_path):
    path = tmp_path / "weighted.yaml"
    path.write_text("qtypes:\n  default:\n    - {name: original, role: anchor, transform: identity}\n"
                    "    - {name: blank, role: abstain, transform: gray, weight: 0.5}\n")
    return path


def test_a_view_weight_under_an_algorithm_that_ignores_it_is_a_config_error(tmp_path):
    """Only BPO reads view weights: a weight != 1 under GRPO, T-GRPO or a wrapper over them would change nothing,
    so planning the run (what the trainer does too) names the file, the view and the algorithm."""
    import pytest

    from mmrl.config import load_config
    from mmrl.errors import ConfigError
    from mmrl.train.plan import describe_plan
    from tests.support import REPO

    path = _weighted_viewset(tmp_path)
    demo = str(REPO / "configs" / "demo.yaml")
    for algo in (["algorithm.name=grpo"], ["algorithm.name=tgrpo"],
                 ["algorithm.name=fastrl", "algorithm.params={base: grpo, total_steps: 10}"]):
        cfg = load_config([demo], algo + [f"algorithm.viewset={path}"])
        with pytest.raises(ConfigError, match=rf"{path}.*view 'blank' has weight 0.5.*'{cfg.algorithm.name}'"):
            describe_plan(cfg)
    for algo in (["algorithm.name=bpo", "algorithm.params={}"],
                 ["algorithm.name=fastrl", "algorithm.params={base: bpo, total_steps: 10}"]):
        cfg = load_config([demo], algo + [f"algorithm.viewset={path}"])
        assert any("blank (abstain)" in line for line in describe_plan(cfg))
