"""The scorer's temperature (issue 30): log-probs at T equal ``log_softmax(logits / T)`` of a plain forward, for
every shared-prompt layout and for multi-turn sequences, so the old/new ratio of every method is taken under the
distribution the rollout sampled from."""
import pytest
import torch

from mmrl.media.inputs import SequenceInputs
from mmrl.models.loading import load_model, load_processor
from mmrl.models.scoring import response_logprobs
from support import mixed_requests, trained_position_ids, policy_log_softmax


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    model.eval()
    return proc, model


def _plain(model, ids, mm, vision, start, n, temperature, pos):
    """log_softmax(logits / T) of one ordinary forward (at the trained M-RoPE positions ``pos``) at the ``n`` tokens
    after ``start``."""
    logits = model(input_ids=ids[None], mm_token_type_ids=mm[None], position_ids=pos, **vision).logits[0]
    lp = policy_log_softmax(logits[start - 1: start - 1 + n].float() / temperature, model)
    return lp.gather(-1, ids[start: start + n, None]).squeeze(-1)


def _items(proc):
    g = torch.Generator().manual_seed(1)
    reqs = mixed_requests(proc, lambda i: 2, lambda i: "Which colour?" + " x" * i)
    return [(r.inputs, torch.randint(0, 500, (L,), generator=g)) for r in reqs for L in (3, 6)]


@pytest.mark.parametrize("temperature", [0.7])
@pytest.mark.parametrize("strategy", ["packed", "expand", "full"])
def test_logprobs_at_t_equal_log_softmax_of_logits_over_t(tiny, strategy, temperature):
    proc, model = tiny
    items = _items(proc)
    with torch.no_grad():
        ours = response_logprobs(model, items, temperature=temperature, micro_batch=4,
                                 pad_id=proc.tokenizer.pad_token_id, strategy=strategy)
        at_one = response_logprobs(model, items, temperature=1.0, micro_batch=4, pad_id=proc.tokenizer.pad_token_id,
                                   strategy=strategy)
        for (p, r), lp, lp1 in zip(items, ours, at_one):
            ids = torch.cat([p.input_ids, r])
            mm = torch.cat([p.mm_token_type_ids, torch.zeros_like(r)])
            want = _plain(model, ids, mm, p.vision, p.num_tokens, r.numel(), temperature,
                          trained_position_ids(model, p, r))
            assert torch.allclose(lp, want, atol=1e-5), (strategy, temperature, (lp - want).abs().max())
            assert not torch.allclose(lp, lp1, atol=1e-3)  # T matters: these are not the T = 1 log-probs


@pytest.mark.parametrize("temperature", [0.7])
def test_multi_turn_sequences_score_at_t_too(tiny, temperature):
    """A multi-turn item (``SequenceInputs``: prompt, model turn, observation, model turn) is scored at T as well,
    whether or not its prompt is shared."""
    proc, model = tiny
    items = _items(proc)[:2]
    g = torch.Generator().manual_seed(2)
    seqs = []
    for share in (True, False):
        for p, r in items:
            tail = torch.randint(0, 500, (7,), generator=g)
            seq = SequenceInputs(input_ids=torch.cat([p.input_ids, tail]),
                                 mm_token_type_ids=torch.cat([p.mm_token_type_ids, torch.zeros_like(tail)]),
                                 vision=p.vision, prompt_len=p.num_tokens, prompt=p if share else None)
            seqs.append((seq, tail))
    with torch.no_grad():  # shared prompts (score_shared) and whole sequences (score_sequences), one call each
        ours = [lp for part in (seqs[:2], seqs[2:])
                for lp in response_logprobs(model, part, temperature=temperature, pad_id=proc.tokenizer.pad_token_id)]
        for (s, tail), lp in zip(seqs, ours):
            want = _plain(model, s.input_ids, s.mm_token_type_ids, s.vision, s.prompt_len, tail.numel(), temperature,
                          trained_position_ids(model, s))
            assert torch.allclose(lp, want, atol=1e-5), (lp - want).abs().max()
