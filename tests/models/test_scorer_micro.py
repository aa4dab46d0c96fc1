"""The scorer on a micro Qwen2.5-VL built in memory (``micro_model``): every layout's log-probs equal
``log_softmax(logits / T)`` of one plain forward, at T = 0.7 and T = 1, over shared and distinct prompts with an
image, a video or no media, ragged responses (one token included) and several micro-batches; gradients too; the
layout each case picks; multi-turn sequences (a shared or an own prompt, an image in an observation, observations
at log-prob 0) and a mix of both kinds in the items' order."""
from types import SimpleNamespace

import pytest
import torch

from micro_model import IMAGE, PAD, V_END, V_START, micro_model, prompt, response
from mmrl.media.inputs import SequenceInputs, collate_vision
from mmrl.models import scoring
from mmrl.models.scoring import response_logprobs
from support import trained_position_ids, policy_log_softmax

T = 0.7


@pytest.fixture(scope="module")
def model():
    return micro_model()


def plain(model, inputs, resp, temperature, trained=None):
    """log_softmax(logits / T) at the response tokens of one ordinary forward over prompt + response (0 where
    ``trained`` is false)."""
    ids = torch.cat([inputs.input_ids, resp])
    mm = torch.cat([inputs.mm_token_type_ids, torch.zeros_like(resp)])
    if isinstance(inputs, SequenceInputs):
        ids, mm, P = inputs.input_ids, inputs.mm_token_type_ids, inputs.prompt_len
        pos = trained_position_ids(model, inputs)
    else:
        P = inputs.num_tokens
        pos = trained_position_ids(model, inputs, resp)
    logits = model(input_ids=ids[None], mm_token_type_ids=mm[None], position_ids=pos, **inputs.vision).logits[0]
    lp = policy_log_softmax(logits[P - 1: P - 1 + resp.numel()].float() / temperature, model)
    lp = lp.gather(-1, ids[P: P + resp.numel(), None]).squeeze(-1)
    return lp if trained is None else torch.where(trained, lp, torch.zeros_like(lp))


def items():
    """Image prompt x 3 (lengths 1, 4, 2), video prompt x 2 (3, 5), text prompt x 1 (2): micro-batches of 4 split
    the video group across two chunks."""
    img, vid, txt = prompt("image", seed=1), prompt("video", seed=2), prompt("text", seed=3)
    lens = [(img, 1), (img, 4), (img, 2), (vid, 3), (vid, 5), (txt, 2)]
    return [(p, response(n, i)) for i, (p, n) in enumerate(lens)]


@pytest.mark.parametrize("strategy, temperature", [("packed", T), ("expand", T), ("full", T), ("onepass", T),
                                                   ("auto", T), ("auto", 1.0)])
def test_every_layout_equals_log_softmax_of_a_plain_forward_over_t(model, strategy, temperature):
    its = items()
    with torch.no_grad():
        ours = response_logprobs(model, its, temperature=temperature, micro_batch=4, pad_id=PAD, strategy=strategy)
        for (p, r), lp in zip(its, ours):
            want = plain(model, p, r, temperature)
            assert lp.shape == r.shape and torch.allclose(lp, want, atol=1e-5), (strategy, (lp - want).abs().max())


def test_t_changes_the_logprobs(model):
    its = items()[:2]
    with torch.no_grad():
        a = response_logprobs(model, its, temperature=T, pad_id=PAD)
        b = response_logprobs(model, its, temperature=1.0, pad_id=PAD)
    assert not torch.allclose(a[1], b[1], atol=1e-3)


@pytest.mark.parametrize("strategy", ["packed", "expand", "full", "onepass"])
def test_gradients_equal_a_plain_forwards(model, strategy):
    its = items()[1:4]  # image x 2 (4 and 2 tokens), video x 1
    model.zero_grad(set_to_none=True)
    torch.cat([plain(model, p, r, T) for p, r in its]).sum().backward()
    ref = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    torch.cat(response_logprobs(model, its, temperature=T, micro_batch=8, pad_id=PAD, strategy=strategy)).sum().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    assert got.keys() == ref.keys() and any("visual" in n for n in got)
    for n, g in got.items():
        assert torch.allclose(g, ref[n], atol=2e-5, rtol=1e-4), (strategy, n, (g - ref[n]).abs().max())


class Flash:
    """The model as FlashAttention-2 would configure it (``config._attn_implementation``), its modules as they are."""

    def __init__(self, model):
        self._m, self.config = model, SimpleNamespace(_attn_implementation="flash_attention_2")

    def __getattr__(self, name):
        return getattr(self._m, name)


# ---- which layout runs --------------------------------------------------------------------------------------------

class Calls(list):
    chunk_tokens: list  # the chunk_tokens each call got


@pytest.fixture
def calls(monkeypatch):
    seen = Calls()
    seen.chunk_tokens = []
    for name, fn in list(scoring._SCORERS.items()):
        def rec(core, head, chunk, temperature, pad_id, device, chunk_tokens, _n=name, _f=fn):
            seen.append((_n, len(chunk), temperature, pad_id, str(device)))
            seen.chunk_tokens.append(chunk_tokens)
            return _f(core, head, chunk, temperature, pad_id, device, chunk_tokens)
        monkeypatch.setitem(scoring._SCORERS, name, rec)
    return seen


def test_chunk_tokens_reach_every_layout(model, calls):
    its = items()[:3]
    with torch.no_grad():
        for strategy in scoring.STRATEGIES:
            response_logprobs(model, its, pad_id=PAD, strategy=strategy, chunk_tokens=7)
        response_logprobs(model, its, pad_id=PAD)
    assert [c[0] for c in calls] == list(scoring.STRATEGIES) + ["packed"]
    assert calls.chunk_tokens == [7] * len(scoring.STRATEGIES) + [scoring.CHUNK_TOKENS]


def test_auto_picks_per_micro_batch_and_passes_t_and_pad(model, calls):
    its = items()
    long = [(its[0][0], response(60, 9)), (its[0][0], response(3, 8))]  # (2-1) x 59 <= 192: packed
    with torch.no_grad():
        response_logprobs(model, its[:3] + its[5:], temperature=T, micro_batch=3, pad_id=PAD)
        response_logprobs(model, [its[5]] + [(its[3][0], response(100, 7)), (its[3][0], response(100, 6)),
                                             (its[3][0], response(100, 5))], micro_batch=4, pad_id=PAD)
        response_logprobs(model, long, pad_id=PAD)
    assert calls == [("packed", 3, T, PAD, "cpu"), ("expand", 1, T, PAD, "cpu"),  # the text prompt alone: n = 1
                     ("expand", 4, 1.0, PAD, "cpu"),  # 3 x 99 > 192
                     ("packed", 2, 1.0, PAD, "cpu")]


def test_without_a_kv_cache_the_shared_layouts_become_onepass_and_flash_is_full(model, calls, monkeypatch):
    its = items()[:3]
    model.train()
    model.gradient_checkpointing_enable()
    try:
        for strategy in ("packed", "expand", "auto", "onepass", "full"):
            response_logprobs(model, its, temperature=T, pad_id=PAD, strategy=strategy)
    finally:
        model.gradient_checkpointing_disable()
        model.eval()
    assert [c[0] for c in calls] == ["onepass"] * 4 + ["full"]
    calls.clear()
    with torch.no_grad():
        for strategy in ("packed", "onepass", "auto"):
            response_logprobs(Flash(model), its, pad_id=PAD, strategy=strategy)
    assert [c[0] for c in calls] == ["full"] * 3


def test_an_unknown_layout_is_refused():
    with pytest.raises(ValueError) as e:
        response_logprobs(None, [], strategy="dense")
    assert str(e.value) == "scoring strategy must be one of auto, packed, expand, full, onepass; got 'dense'"


# ---- multi-turn sequences -----------------------------------------------------------------------------------------

def sequence(p, seed, share=True, observation_image=True):
    """``p`` + model turn (3) + observation (an image when asked, else 4 text tokens) + model turn (2)."""
    g = torch.Generator().manual_seed(seed)
    obs = prompt("image", n_text=2, seed=seed) if observation_image else prompt("text", n_text=1, seed=seed)
    m1, m2 = torch.randint(0, 40, (3,), generator=g), torch.randint(0, 40, (2,), generator=g)
    tail = torch.cat([m1, obs.input_ids, m2])
    types = torch.cat([torch.zeros(3, dtype=torch.long), obs.mm_token_type_ids, torch.zeros(2, dtype=torch.long)])
    trained = torch.cat([torch.ones(3, dtype=torch.bool), torch.zeros(obs.num_tokens, dtype=torch.bool),
                         torch.ones(2, dtype=torch.bool)])
    seq = SequenceInputs(input_ids=torch.cat([p.input_ids, tail]), mm_token_type_ids=torch.cat([p.mm_token_type_ids,
                         types]), vision=collate_vision([p, obs]), prompt_len=p.num_tokens, prompt=p if share else None,
                         trained=trained)
    return seq, tail


@pytest.mark.parametrize("share, temperature", [(True, T), (False, T), (True, 1.0)])
def test_sequences_score_their_model_turns_at_t_and_their_observations_at_zero(model, share, temperature):
    vid, img = prompt("video", seed=4), prompt("image", seed=5)
    seqs = [sequence(vid, 1, share), sequence(vid, 2, share, observation_image=False), sequence(img, 3, share)]
    assert IMAGE in seqs[0][1] and V_START in seqs[0][1] and V_END in seqs[0][1]
    with torch.no_grad():
        # micro-batches of 3: the first chunk holds the video prompt's two sequences and the image prompt's one, so
        # the shorter prompt is padded in the shared prefill
        ours = response_logprobs(model, seqs, temperature=temperature, micro_batch=3, pad_id=PAD)
        for (s, tail), lp in zip(seqs, ours):
            want = plain(model, s, tail, temperature, s.trained)
            assert torch.allclose(lp, want, atol=1e-5), (share, (lp - want).abs().max())
            assert (lp[~s.trained] == 0).all() and (lp[s.trained] < 0).all()


def test_a_mix_of_single_turn_items_and_sequences_keeps_the_items_order(model):
    single = items()
    seqs = [sequence(prompt("video", seed=4), 1), sequence(prompt("image", seed=5), 3, share=False)]
    mixed = [seqs[0], single[0], single[4], seqs[1], single[5]]
    with torch.no_grad():
        ours = response_logprobs(model, mixed, temperature=T, micro_batch=1, pad_id=0)  # any pad id: it is masked
        for (p, r), lp in zip(mixed, ours):
            tr = p.trained if isinstance(p, SequenceInputs) else None
            assert torch.allclose(lp, plain(model, p, r, T, tr), atol=1e-5)


def test_sequences_without_a_kv_cache_are_scored_whole(model, monkeypatch):
    from mmrl.models import sequence_scoring

    used = []
    for name in ("score_shared", "score_sequences"):
        fn = getattr(scoring, name)
        monkeypatch.setattr(scoring, name, lambda *a, _n=name, _f=fn, **k: used.append(_n) or _f(*a, **k))
    seqs = [sequence(prompt("video", seed=4), 1), sequence(prompt("video", seed=4), 2)]
    seqs[1] = (SequenceInputs(**{**seqs[1][0].__dict__, "prompt": seqs[0][0].prompt}), seqs[1][1])
    with torch.no_grad():
        response_logprobs(model, seqs, pad_id=PAD)  # both share: one prefill
        response_logprobs(model, [seqs[0], sequence(prompt("text"), 5, share=False)], pad_id=PAD)
        response_logprobs(Flash(model), seqs, pad_id=PAD)
    assert used == ["score_shared", "score_sequences", "score_sequences"]
    assert sequence_scoring.score_shared is not None


@pytest.mark.parametrize("strategy", ["packed", "expand", "full", "onepass"])
def test_a_chunk_of_one_item_in_every_layout(model, strategy):
    """Six items in micro-batches of five: the last chunk holds one item (a one-token response)."""
    its = items()[1:] + items()[:1]
    with torch.no_grad():
        ours = response_logprobs(model, its, temperature=T, micro_batch=5, pad_id=PAD, strategy=strategy)
        for (p, r), lp in zip(its, ours):
            assert torch.allclose(lp, plain(model, p, r, T), atol=1e-5)
