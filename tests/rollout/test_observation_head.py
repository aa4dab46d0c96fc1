"""Multi-turn scoring puts only the model's tokens through the LM head (``SequenceInputs.trained``): on them the
log-probs and gradients equal scoring every token; observation tokens get 0 (as the sampler records them), and the
head sees fewer rows. Both scorers (``score_shared``, ``score_sequences``)."""
import dataclasses

import torch

from mmrl.models.loading import load_model, load_processor
from mmrl.models.scoring import backbone
from mmrl.models.sequence_scoring import score_sequences, score_shared
from mmrl.rollout.base import SamplingParams

from test_kv_reuse import _run


def test_observations_skip_the_head(tiny_model_path):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    reqs, trajs = _run(proc, model, True, SamplingParams(max_new_tokens=4, greedy=True))
    items = [t.scoring_item([r.inputs for r in reqs]) for t in trajs]
    assert all(torch.equal(s.trained, t.loss_mask) for (s, _), t in zip(items, trajs))
    assert any(not bool(t.loss_mask.all()) for t in trajs)
    every = [(dataclasses.replace(s, trained=None), r) for s, r in items]
    core, head = backbone(model)
    rows = []
    hook = head.register_forward_hook(lambda m, i, o: rows.append(i[0].shape[0]))
    try:
        for scorer in (score_shared, score_sequences):
            out = {}
            for name, chunk in (("trained", items), ("every", every)):
                model.zero_grad()
                rows.clear()
                lps = scorer(core, head, chunk, 1.0, 0, "cpu")
                n = sum(rows)  # the forward's rows (backward recomputes each chunk of the head)
                sum((lp * t.loss_mask).sum() for lp, t in zip(lps, trajs)).backward()
                out[name] = (lps, [p.grad.clone() for p in model.parameters() if p.grad is not None], n)
            (a, ga, na), (b, gb, nb) = out["trained"], out["every"]
            assert na == sum(int(t.loss_mask.sum()) for t in trajs) < nb
            for x, y, t in zip(a, b, trajs):
                m = t.loss_mask
                assert torch.allclose(x[m], y[m], atol=1e-5) and torch.equal(x[~m], torch.zeros(int((~m).sum())))
                assert torch.allclose(x, t.logprobs, atol=1e-4)  # the sampler's log-probs, observations included
            for x, y in zip(ga, gb):
                assert torch.allclose(x, y, atol=1e-5, rtol=1e-4)
    finally:
        hook.remove()
