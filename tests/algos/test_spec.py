"""Algorithm specs: typed params, plan (rollout.n applies or is a ConfigError), wrapping, DAPO's select."""
from dataclasses import dataclass

import pytest
import torch

from mmrl.algos.base import AdvantageOutput, LossParams
from mmrl.algos.spec import (ALGORITHMS, Selection, StepBatch, WrapperParams, WrapperSpec, build_spec,
                             register_algorithm)
from mmrl.errors import ConfigError


def _batch(rewards, gids, acc=None, roles=None):
    r = torch.tensor(rewards, dtype=torch.float32)
    comps = {"accuracy": torch.tensor(acc, dtype=torch.float32)} if acc is not None else {}
    n = len(rewards)
    return StepBatch(rewards=r, components=comps, groups={"prompt": torch.tensor(gids), "pack": torch.zeros(n, dtype=torch.long)},
                     roles=roles or ["anchor"] * n, views=["original"] * n, lengths=torch.full((n,), 3))


def test_params_are_typed_and_unknown_keys_named():
    spec = build_spec("grpo", {"std_scale": "batch", "eps": 0.0}, LossParams())
    assert spec.params.std_scale == "batch" and spec.params.eps == 0.0
    with pytest.raises(ConfigError, match=r"algorithm.params.std_scal\b.*known: eps, std_scale, unbiased_std"):
        build_spec("grpo", {"std_scal": "batch"}, LossParams())
    with pytest.raises(ConfigError, match="algorithm.params.eps"):
        build_spec("grpo", {"eps": "lots"}, LossParams())
    with pytest.raises(ConfigError, match="algorithm.name.*known:.*bpo.*grpo"):
        build_spec("grpoo", {}, LossParams())


def test_config_rejects_unknown_algorithm_params_before_loading(tmp_path):
    from mmrl.config import load_config

    with pytest.raises(ConfigError, match="algorithm.params.packz"):
        load_config(None, ["algorithm.name=bpo", "algorithm.params.packz=2"])
    with pytest.raises(ConfigError, match="algorithm.name"):
        load_config(None, ["algorithm.name=nope"])


def test_plan_grpo_tgrpo_bpo():
    assert build_spec("grpo", {}, LossParams()).plan("anchor", 8, 4) == 8
    tg = build_spec("tgrpo", {}, LossParams())
    assert (tg.plan("anchor", 8, 2), tg.plan("shuffled", 8, 2)) == (8, 4)
    assert build_spec("tgrpo", {"shuffled_fraction": 0.25}, LossParams()).plan("shuffled", 8, 2) == 2
    bpo = build_spec("bpo", {}, LossParams())
    assert bpo.plan("stable", 8, 4) == 2 and bpo.plan("anchor", 8, 2) == 4  # packs = rollout.n / views
    with pytest.raises(ConfigError, match="rollout.n' = 7"):
        bpo.plan("anchor", 7, 4)
    with pytest.raises(ConfigError, match="algorithm.params.packs"):
        build_spec("bpo", {"packs": 2}, LossParams())


def test_dapo_select_keeps_mixed_groups_and_asks_for_more():
    spec = build_spec("dapo", {}, LossParams())
    # groups 0 (all right), 1 (mixed), 2 (mixed), 3 (all wrong)
    b = _batch([1, 1, 1, 0, 0, 1, 0, 0], [0, 0, 1, 1, 2, 2, 3, 3], acc=[1, 1, 1, 0, 0, 1, 0, 0])
    b.target_groups = 3
    out = spec.advantages(b)
    sel = spec.select(b, out)
    assert sel.train_mask.tolist() == [False, False, True, True, True, True, False, False]
    assert sel.resample == 1 and spec.max_resample_rounds() == 3
    b.target_groups = 1  # more mixed groups than needed: the first by group id are kept
    assert spec.select(b, out).train_mask.tolist() == [False, False, True, True, False, False, False, False]
    off = build_spec("dapo", {"dynamic_sampling": False}, LossParams())
    assert off.select(b, out).train_mask.all() and off.max_resample_rounds() == 0


@dataclass
class _HalfParams(WrapperParams):
    scale: float = 0.5


@register_algorithm("test_half")
class _Half(WrapperSpec):
    """A wrapper that halves its base's advantages and drops the last row."""

    Params = _HalfParams

    def advantages(self, batch):
        out = self.base.advantages(batch)
        out.advantages = out.advantages * self.params.scale
        return out

    def select(self, batch, out):
        sel = self.base.select(batch, out)
        mask = sel.train_mask.clone()
        mask[-1] = False
        return Selection(train_mask=mask, resample=sel.resample)


def test_wrapper_delegates_and_overrides():
    b = _batch([1, 0, 1, 0], [0, 0, 1, 1])
    base = build_spec("grpo", {"eps": 0.0}, LossParams()).advantages(b).advantages
    w = build_spec("test_half", {"base": "grpo"}, LossParams())
    assert torch.allclose(w.advantages(b).advantages, base * 0.5)
    assert w.select(b, w.advantages(b)).train_mask.tolist() == [True, True, True, False]
    assert w.plan("anchor", 6, 1) == 6
    tg = build_spec("test_half", {"base": {"name": "tgrpo", "params": {"shuffled_fraction": 0.25}}}, LossParams())
    assert tg.plan("shuffled", 8, 2) == 2  # the base's plan, with the base's params
    with pytest.raises(ConfigError, match="algorithm.params.base.params.nope"):
        build_spec("test_half", {"base": {"name": "grpo", "params": {"nope": 1}}}, LossParams())
    with pytest.raises(ConfigError, match="algorithm.params.base"):
        build_spec("test_half", {"base": "grpoo"}, LossParams())
    assert "test_half" in ALGORITHMS


def test_step_batch_subset():
    b = _batch([1, 2, 3], [0, 0, 1], acc=[1, 0, 1])
    s = b.subset([2, 0])
    assert s.rewards.tolist() == [3.0, 1.0] and s.groups["prompt"].tolist() == [1, 0]
    assert s.components["accuracy"].tolist() == [1.0, 1.0]


def _full_batch(n=4):
    """A batch with every per-row field set, row i recognisable in each (value i or 10 + i)."""
    rows = torch.arange(n)
    return StepBatch(rewards=rows.float(), components={"accuracy": rows.float() + 10, "format": -rows.float()},
                     groups={"prompt": rows * 2, "pack": rows + 100}, roles=[f"role{i}" for i in range(n)],
                     views=[f"view{i}" for i in range(n)], lengths=rows + 1,
                     view_weights=rows.to(torch.float64) / 10,
                     response_ids=[torch.full((i + 1,), i) for i in range(n)], texts=[f"text{i}" for i in range(n)],
                     logprobs=[torch.full((i + 1,), -float(i)) for i in range(n)],
                     rescored={"patch": [torch.full((i + 1,), float(i)) for i in range(n)]},
                     step=7, epoch=2, world_size=2, target_groups=3, decode=str)


def _row_values(x):
    """A per-row value as a comparable list (tensors -> lists)."""
    return [v.tolist() if isinstance(v, torch.Tensor) else v for v in x]


def test_step_batch_subset_takes_every_per_row_field():
    """Every field whose value has one entry per row (or a dict of such) is subset in the order asked; a field
    added later that subset forgets fails here (issue 30: ``view_weights`` was left whole)."""
    import dataclasses

    b, idx = _full_batch(4), [3, 1]
    s = b.subset(idx)
    n_checked = 0
    for f in dataclasses.fields(StepBatch):
        full, part = getattr(b, f.name), getattr(s, f.name)
        if isinstance(full, dict):
            assert full.keys() == part.keys(), f.name
            for k in full:
                assert _row_values(part[k]) == [_row_values(full[k])[i] for i in idx], (f.name, k)
            n_checked += 1
        elif isinstance(full, (torch.Tensor, list)):
            assert _row_values(part) == [_row_values(full)[i] for i in idx], f.name
            n_checked += 1
        else:  # step, epoch, world_size, target_groups, decode: shared
            assert part == full, f.name
    assert n_checked == 11  # rewards, components, groups, roles, views, lengths, view_weights, ids, texts, logprobs, rescored
    assert s.view_weights.dtype == torch.float64 and len(s) == 2
    assert b.subset([0]).view_weights.tolist() == [0.0]
    no_weights = dataclasses.replace(b, view_weights=None)
    assert no_weights.subset(idx).view_weights is None  # None (all 1) stays None
