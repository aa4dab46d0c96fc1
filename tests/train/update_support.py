"""A policy small enough to differentiate by hand: a bigram table over a 7-token vocabulary.

``bigram_logprobs`` stands in for ``mmrl.models.scoring.response_logprobs`` (same signature): token t's
log-prob is ``log_softmax(W[prev] / temperature)[token]`` with ``prev`` the prompt id for the first token.
``run_update`` calls ``mmrl.train.update.policy_update`` through the real one-process ``Backend`` with it, so
the tests see the real micro-batching, shares, KL, clipping and optimizer step; only the scorer is replaced.
"""
from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import List, Optional

import torch

from mmrl.config import AlgorithmConfig, TrainConfig
from mmrl.data.schema import Trajectory

V = 7


class Bigram(torch.nn.Module):
    def __init__(self, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = torch.nn.Parameter(torch.randn(V, V, generator=g, dtype=torch.float64) * 0.7)
        self.frozen = torch.nn.Parameter(torch.ones(2, dtype=torch.float64), requires_grad=False)


def bigram_logprobs(model, items, temperature: float = 1.0, micro_batch: int = 16, pad_id: int = 0,
                    chunk_tokens: int = 0) -> List[torch.Tensor]:
    out = []
    for prompt, resp in items:
        prev = torch.cat([prompt.view(1), resp[:-1]])
        out.append(torch.log_softmax(model.w[prev] / temperature, -1).gather(1, resp[:, None])[:, 0])
    return out


def make_batch(masks: List[List[int]], seed: int = 1):
    """Trajectories with the given loss masks (their lengths), random tokens, prompt ids and advantages."""
    g = torch.Generator().manual_seed(seed)
    trajs, inputs = [], []
    for i, m in enumerate(masks):
        n = len(m)
        inputs.append(torch.randint(0, V, (1,), generator=g))
        resp = torch.randint(0, V, (n,), generator=g)
        trajs.append(Trajectory(sample_id=f"s{i}", group_id=i // 2, view="original", role="anchor",
                                prompt_ids=inputs[-1], response_ids=resp, logprobs=torch.zeros(n),
                                loss_mask=torch.tensor(m, dtype=torch.bool), text="", inputs_key=i))
    adv = torch.randn(len(masks), generator=g, dtype=torch.float64)
    return trajs, inputs, adv


def perturbed(model, trajs, inputs, scale: float, seed: int) -> List[torch.Tensor]:
    """Log-probs of another policy near ``model`` (old or reference), detached."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        lps = bigram_logprobs(model, [(inputs[t.inputs_key], t.response_ids) for t in trajs])
    return [lp + scale * torch.randn(lp.shape, generator=g, dtype=lp.dtype) for lp in lps]


def make_backend(monkeypatch, model, micro_batch: int, grad_clip: float = 0.0, lr: float = 0.0,
                 temperature: float = 1.0, pad_id: int = 0, autocast=contextlib.nullcontext, cls=None):
    """The one-process ``Backend`` over ``model`` with SGD(lr) and the bigram scorer."""
    from mmrl.train import backend

    monkeypatch.setattr(backend, "response_logprobs", bigram_logprobs)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    cfg = SimpleNamespace(rollout=SimpleNamespace(temperature=temperature),
                          train=TrainConfig(micro_batch=micro_batch, grad_clip=grad_clip))
    return (cls or backend.Backend)(model, opt, None, None, autocast, cfg, pad_id)


def run_update(monkeypatch, model, trajs, inputs, adv, cfg_algo: AlgorithmConfig, micro_batch: int,
               grad_clip: float = 0.0, lr: float = 0.0, old=None, ref=None, temperature: float = 1.0):
    """``policy_update`` with SGD(lr); returns (stats, grads as they were when the optimizer stepped)."""
    from mmrl.train import update

    be = make_backend(monkeypatch, model, micro_batch, grad_clip, lr, temperature)
    stats = update.policy_update(be, trajs, inputs, adv, cfg_algo, micro_batch, old, ref)
    return stats, model.w.grad.detach().clone()


def reference_grad(model, trajs, inputs, adv, cfg_algo, old=None, ref=None, temperature: float = 1.0,
                   kl_in_loss: Optional[bool] = None):
    """The gradient of the whole batch's loss as ONE micro-batch, built from the loss functions directly."""
    from mmrl.algos.base import POLICY_LOSSES
    from mmrl.algos.losses import aggregate, k3_kl
    from mmrl.media.inputs import pad_right

    model.zero_grad(set_to_none=True)
    lps = bigram_logprobs(model, [(inputs[t.inputs_key], t.response_ids) for t in trajs], temperature)
    logp = pad_right([x for x in lps], 0.0)
    mask = pad_right([t.loss_mask.float() for t in trajs], 0.0)
    old_t = logp.detach() if old is None else pad_right(old, 0.0)
    loss, _ = POLICY_LOSSES.get(cfg_algo.loss)(logp, old_t, adv, mask, cfg_algo)
    if ref is not None and cfg_algo.kl_coef > 0:
        loss = loss + cfg_algo.kl_coef * aggregate(k3_kl(logp, pad_right(ref, 0.0)), mask, cfg_algo.loss_agg,
                                                   cfg_algo.max_response_len)
    loss.backward()
    g = model.w.grad.detach().clone()
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), g


def algo(loss: str = "ppo", agg: str = "token-mean", kl_coef: float = 0.0, max_len: Optional[int] = 8,
         **kw) -> AlgorithmConfig:
    cfg = AlgorithmConfig(loss=loss, loss_agg=agg, kl_coef=kl_coef, max_response_len=max_len, **kw)
    if loss.startswith("gspo"):
        cfg.gspo_loss_agg = agg
    return cfg
