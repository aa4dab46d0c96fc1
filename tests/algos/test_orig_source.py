"""PACG, VPPO and DSPO compare a re-scored log-prob with the original one; by default both come from the trainer's
scorer, so a sampler whose log-probs are off (vLLM in bf16, a stale async worker) leaves their gates unchanged."""
import pytest
import torch

from mmrl.algos.base import LossParams
from mmrl.algos.spec import build_spec
from mmrl.algos.vppo import ORIGINAL_KEY
from tests.algos.test_dspo_spec import _batch as dspo_batch
from tests.algos.test_dspo_spec import resp
from tests.algos.test_pacg_spec import TEXTS, make_batch


def _off(lps, seed=0):
    """The sampler's log-probs, deliberately off: a bf16-sized error would be ~1e-2; this is 0.5 nats."""
    g = torch.Generator().manual_seed(seed)
    return [lp + 0.5 * torch.randn(lp.shape, generator=g) - 0.3 for lp in lps]


SAMPLING = {"orig_source": "sampling"}


@pytest.mark.parametrize("name,params,switched", [
    ("pacg", {"base": "grpo"}, {"base": "grpo", **SAMPLING}),
    ("pacg", {"base": "vppo"}, {"base": {"name": "vppo", "params": SAMPLING}, **SAMPLING}),
    ("vppo", {"dynamic_sampling": False}, {"dynamic_sampling": False, **SAMPLING})])
def test_gate_ignores_the_samplers_logprobs_by_default(name, params, switched):
    clean = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.95, 0.3, 0.25])
    off = make_batch(TEXTS, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], claim_p=[0.2, 0.95, 0.3, 0.25])
    off.logprobs = _off(off.logprobs)
    spec = build_spec(name, params, LossParams())
    assert ORIGINAL_KEY in spec.needs().rescore  # the unchanged view is re-scored by the trainer
    want = spec.advantages(clean)
    got = spec.advantages(off)
    assert torch.equal(got.advantages, want.advantages)
    assert got.metrics == want.metrics
    # with the sampler's log-probs as the original (the explicit switch) the same error moves the gate
    sampling = build_spec(name, switched, LossParams())
    assert ORIGINAL_KEY not in sampling.needs().rescore
    assert torch.equal(sampling.advantages(clean).advantages, want.advantages)  # trainer = sampler: the same
    assert not torch.allclose(sampling.advantages(off).advantages, want.advantages, atol=1e-3)


def test_bad_orig_source_is_refused():
    from mmrl.errors import ConfigError

    for name in ("pacg", "vppo"):
        with pytest.raises((ConfigError, ValueError), match="orig_source"):
            build_spec(name, {"orig_source": "vllm"}, LossParams())


def test_dspo_cvig_ignores_the_samplers_logprobs_by_default(tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    texts = [resp(["sadness", "fear", "gloom"]), "garbage"]
    batch, _ = dspo_batch(texts, tok)
    spec = build_spec("dspo", {"tokenizer": tiny_model_path, "mask": "pixel", "div_weight": 0.3}, LossParams())
    want = spec.advantages(batch).rewards.clone()
    # the sampler's log-probs: the candidates' first tokens as far off as the real p_k (0.5, 0.3, 0.2) are from 1
    batch.logprobs = [torch.zeros_like(lp) for lp in batch.rescored["cvig_orig"]]
    assert torch.equal(spec.advantages(batch).rewards, want)
    sampling = build_spec("dspo", {"tokenizer": tiny_model_path, "mask": "pixel", "div_weight": 0.3,
                                   "p_source": "sampling"}, LossParams())
    assert not torch.allclose(sampling.advantages(batch).rewards, want, atol=1e-3)
