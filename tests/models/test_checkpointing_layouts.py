"""Gradient checkpointing keeps the shared-prompt scoring (issue 26 item 7): the ``onepass`` layout (each distinct
prompt and its responses in one forward, no KV cache) equals the cached layouts and a plain forward, with and
without checkpointing, and runs the vision tower once per distinct prompt, not once per response."""
import pytest
import torch

from mmrl.models.loading import load_model, load_processor
from mmrl.models.scoring import backbone, response_logprobs
from support import mixed_requests


def _items(proc, lengths, n=3):
    g = torch.Generator().manual_seed(0)
    reqs = mixed_requests(proc, lambda i: n, lambda i: "What colour is the square?" + " x" * i)
    return [(r.inputs, torch.randint(0, 500, (L,), generator=g)) for r in reqs for L in lengths]


def _run(model, items, pad_id, strategy="auto"):
    model.zero_grad(set_to_none=True)
    lps = response_logprobs(model, items, micro_batch=9, pad_id=pad_id, strategy=strategy)
    torch.cat(lps).sum().backward()
    return lps, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _vision_rows(model):
    """Patches the vision tower sees, per call."""
    rows = []
    core, _ = backbone(model)
    core.visual.register_forward_hook(lambda m, args, kwargs, out: rows.append(int(args[0].shape[0])) if args else
                                      rows.append(int(kwargs["hidden_states"].shape[0])), with_kwargs=True)
    return rows


@pytest.mark.parametrize("lengths", [(1, 3, 2), (5, 40, 17)])
def test_checkpointing_scores_shared_prompts_with_equal_logprobs_and_grads(tiny_model_path, lengths):
    proc = load_processor(tiny_model_path)
    pad = proc.tokenizer.pad_token_id
    model = load_model(tiny_model_path)
    model.train()
    items = _items(proc, lengths)
    ref_lps, ref_grads = _run(model, items, pad)  # no checkpointing: the cached layouts
    full_lps, _ = _run(model, items, pad, strategy="full")
    model.gradient_checkpointing_enable()
    rows = _vision_rows(model)
    lps, grads = _run(model, items, pad)
    for a, b, c in zip(lps, ref_lps, full_lps):
        assert torch.allclose(a, b, atol=1e-5) and torch.allclose(a, c, atol=1e-5), (a - b).abs().max()
    assert grads.keys() == ref_grads.keys() and any("visual" in n for n in grads)
    for n, g in grads.items():
        assert torch.allclose(g, ref_grads[n], atol=2e-5, rtol=1e-4), (n, (g - ref_grads[n]).abs().max())
    # the vision tower ran once per distinct prompt (3 prompts of 3 responses each; `full` would see 3 x as many)
    patches = sum(int(p.vision["pixel_values" if "pixel_values" in p.vision else "pixel_values_videos"].shape[0])
                  for p in {id(p): p for p, _ in items}.values())
    assert sum(rows) == patches


def test_onepass_equals_packed_in_eval_without_checkpointing(tiny_model_path):
    proc = load_processor(tiny_model_path)
    model = load_model(tiny_model_path).eval()
    items = _items(proc, (2, 7, 4))
    with torch.no_grad():
        a = response_logprobs(model, items, pad_id=proc.tokenizer.pad_token_id, strategy="onepass")
        b = response_logprobs(model, items, pad_id=proc.tokenizer.pad_token_id, strategy="packed")
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(a, b))
