"""The algorithm spec's plumbing (mmrl/algos/spec.py): registration, parameter parsing and its messages, the
wrapper's base forms, the plan of views and roles, selection, binding to the run config and the derived params."""
import uuid
from types import SimpleNamespace

import pytest
import torch

from mmrl.algos.base import AdvantageOutput, LossParams
from mmrl.algos.pacg import PACGParams
from mmrl.algos.spec import (ALGORITHMS, AlgorithmSpec, NoParams, WrapperSpec, build_algorithm, build_spec,
                             derive_params, estimate, parse_params, register_algorithm)
from mmrl.errors import ConfigError
from tests.algos.test_pacg_spec import TEXTS, make_batch

UNSET = object()

if "test_binder" not in ALGORITHMS:
    @register_algorithm("test_binder")
    class Binder(AlgorithmSpec):
        """Records the run config it is bound to."""

        bound = UNSET

        def bind(self, cfg):
            self.bound = cfg


def test_registration_names_the_class():
    cls = ALGORITHMS.get("test_binder")  # the registry names the class; the decorator returns it unchanged
    assert ALGORITHMS.name_of(cls) == "test_binder" and cls.__doc__.startswith("Records") and "name" not in vars(cls)
    assert cls({}, LossParams()).name == "test_binder"
    assert build_spec("grpo", {}, LossParams()).name == "grpo"
    name = f"test_reg_{uuid.uuid4().hex}"  # registered while the test runs (the built-ins register on import)

    @register_algorithm(name)
    class Fresh(AlgorithmSpec):
        pass

    assert ALGORITHMS.get(name) is Fresh and ALGORITHMS.name_of(Fresh) == name and Fresh({}, LossParams()).name == name


PARSE = [
    (lambda: parse_params(PACGParams, {"kapa": 1.0}), r"^config key 'algorithm\.params\.kapa' is not a parameter"),
    (lambda: parse_params(NoParams, {"x": 1}), r"^config key 'algorithm\.params\.x' is not a parameter of this "
                                               r"algorithm; known: \(none\)$"),
    (lambda: parse_params(PACGParams, {"kappa": "abc"}),
     r"^config key 'algorithm\.params\.kappa': Value 'abc' of type 'str' could not be converted to Float$"),
    (lambda: build_spec("grpo", {"bad": 1}, LossParams()), r"^config key 'algorithm\.params\.bad'"),
    (lambda: build_spec("nope", {}, LossParams()), r"^config key 'algorithm\.name'"),
    (lambda: build_spec("pacg", {"base": {"params": {}}}, LossParams()),
     r"^config key 'algorithm\.params\.base' must be an algorithm name or \{name: \.\.\., params: \{\.\.\.\}\}, got "
     r"\{'params': \{\}\}$"),
    (lambda: build_spec("pacg", {"base": {"name": "grpo", "parms": {}}}, LossParams()),
     r"^config key 'algorithm\.params\.base\.parms' is unknown; give base as a name or \{name: \.\.\., params: "
     r"\{\.\.\.\}\}$"),
    (lambda: build_spec("pacg", {"base": {"name": "grpo", "zz": 1, "aa": 2}}, LossParams()),
     r"^config key 'algorithm\.params\.base\.aa' is unknown"),
    (lambda: ALGORITHMS.get("pacg")({"base": "grpo", "kapa": 1}, LossParams()), r"^config key 'algorithm\.params\.kapa'"),
    (lambda: ALGORITHMS.get("pacg")({"base": {"name": "grpo", "params": {"bad": 1}}}, LossParams(), key="x.y"),
     r"^config key 'x\.y\.base\.params\.bad'"),
    (lambda: ALGORITHMS.get("pacg")({"base": "grpo", "kapa": 1}, LossParams(), key="x.y"), r"^config key 'x\.y\.kapa'"),
    (lambda: ALGORITHMS.get("grpo")({"bad": 1}, LossParams()), r"^config key 'algorithm\.params\.bad'"),
    (lambda: WrapperSpec({"base": "grpo", "bad": 1}, LossParams()), r"^config key 'algorithm\.params\.bad'"),
    (lambda: WrapperSpec({"base": {"name": "grpo", "x": 1}}, LossParams()), r"^config key 'algorithm\.params\.base\.x'"),
]


@pytest.mark.parametrize("call,message", PARSE, ids=[str(i) for i in range(len(PARSE))])
def test_config_errors_name_their_key(call, message):
    with pytest.raises(ConfigError, match=message):
        call()


def test_specs_and_their_bases_carry_the_loss_params():
    loss = LossParams(clip_low=0.1)
    for spec in (build_spec("grpo", {}, loss), build_spec("pacg", {"base": "grpo"}, loss),
                 ALGORITHMS.get("fastrl")({"ars": False}, loss)):
        assert spec.loss is loss
    assert build_spec("pacg", {"base": "grpo"}, loss).base.loss is loss
    cfg = SimpleNamespace(name="grpo", params={})
    assert build_algorithm(cfg).loss is cfg  # the algorithm section is the loss side's config


def test_describe_names_the_params_and_the_base():
    assert build_spec("grpo", {}, LossParams()).describe() == "grpo {'std_scale': 'group', 'unbiased_std': True, 'eps': 1e-06}"
    assert build_spec("pacg", {"base": "grpo"}, LossParams()).describe().endswith(
        "over [grpo {'std_scale': 'group', 'unbiased_std': True, 'eps': 1e-06}]")


PLANS = [  # (algorithm, params, role, n, n_views or None for the default, responses)
    ("bpo", {}, "anchor", 8, None, 8),
    ("bpo", {}, "stable", 8, 4, 2),
    ("pacg", {"base": "bpo"}, "anchor", 8, None, 8),
    ("pacg", {"base": "bpo"}, "stable", 8, 4, 2),
    ("tgrpo", {}, "shuffled", 8, None, 4),
    ("tgrpo", {"shuffled_fraction": 0.1}, "shuffled", 8, None, 1),
    ("pacg", {"base": "tgrpo"}, "shuffled", 8, None, 4),
    ("pacg", {"base": "tgrpo"}, "anchor", 8, None, 8),
]


@pytest.mark.parametrize("name,params,role,n,views,out", PLANS, ids=[str(i) for i in range(len(PLANS))])
def test_plan_table(name, params, role, n, views, out):
    spec = build_spec(name, params, LossParams())
    got = spec.plan(role, n) if views is None else spec.plan(role, n, views)
    assert got == out and type(got) is int


def test_bpo_plan_names_rollout_n_and_advises_a_multiple():
    with pytest.raises(ConfigError, match=r"^config key 'rollout\.n' = 7 is not a multiple of the 2 views of a sample "
                                          r"\(BPO: rollout\.n = packs x views\); e\.g\. rollout\.n=6$"):
        build_spec("bpo", {}, LossParams()).plan("anchor", 7, 2)
    with pytest.raises(ConfigError, match=r"e\.g\. rollout\.n=4$"):  # at least one pack
        build_spec("bpo", {}, LossParams()).plan("anchor", 3, 4)


def test_select_keeps_the_advantages_train_mask_as_booleans():
    spec = build_spec("grpo", {}, LossParams())
    batch = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1])
    out = AdvantageOutput(advantages=torch.zeros(4), train_mask=torch.tensor([1, 0, 1, 1]))
    sel = spec.select(batch, out)
    assert sel.train_mask.dtype == torch.bool and sel.train_mask.tolist() == [True, False, True, True]
    assert spec.select(batch, AdvantageOutput(advantages=torch.zeros(4))).train_mask.tolist() == [True] * 4
    assert spec.max_resample_rounds() == 0
    assert len(batch.subset([])) == 0 and batch.subset([2, 0]).texts == [TEXTS[2], TEXTS[0]]


def test_build_algorithm_binds_the_run_config_to_the_base():
    run = SimpleNamespace(train=SimpleNamespace(steps=5))
    spec = build_algorithm(SimpleNamespace(name="pacg", params={"base": "test_binder"}), run)
    assert spec.base.bound is run
    assert build_algorithm(SimpleNamespace(name="test_binder", params={})).bound is UNSET


DERIVE = [  # (algorithm, params before, params after, lines)
    ("fastrl", {}, {"total_steps": 7}, ["algorithm.params.total_steps = 7 (from train.steps; set it to override)"]),
    ("fastrl", {"total_steps": 0}, {"total_steps": 7}, ["algorithm.params.total_steps = 7 (from train.steps; set it to override)"]),
    ("fastrl", {"total_steps": None}, {"total_steps": 7}, ["algorithm.params.total_steps = 7 (from train.steps; set it to override)"]),
    ("fastrl", {"total_steps": 1}, {"total_steps": 1}, []),  # an explicit value is the override
    ("fastrl", {"total_steps": 3}, {"total_steps": 3}, []),
    ("grpo", {}, {}, []),  # nothing derived
    ("no_such_algorithm", {}, {}, []),  # left to the check that names it
]


@pytest.mark.parametrize("name,before,after,lines", DERIVE, ids=[str(i) for i in range(len(DERIVE))])
def test_derive_params_table(name, before, after, lines):
    algo = SimpleNamespace(name=name, params=dict(before))
    assert derive_params(algo, SimpleNamespace(train=SimpleNamespace(steps=7))) == lines
    assert algo.params == after


def test_estimate_refuses_a_spec_that_needs_a_whole_batch():
    with pytest.raises(TypeError, match=r"^algorithm 'pacg' needs a whole StepBatch: call its advantages\(batch\)$"):
        estimate("pacg", None)
