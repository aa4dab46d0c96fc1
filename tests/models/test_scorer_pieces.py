"""The scorer's pieces on hand-built tensors (no model): the layout rule and its note, slots and the packed mask,
prompt positions and their cache, padding, the distinct prompts, the checkpointing and FlashAttention switches, the
LM head's log-probs at T with a trained mask, and the multi-turn checks and tail vision, each against values
written out by hand."""
from types import SimpleNamespace

import pytest
import math

import torch

from mmrl.media.inputs import PromptInputs, SequenceInputs
from mmrl.models.prefill import (backbone, can_cache, can_share, head_logprobs, positions, prompt_positions,
                                 prompt_rope, right_padded, sequence_positions, unique_prompts, uses_flash)
from mmrl.models.scoring import (PACKED_MAX_EXTRA_KEYS, _chunk_strategy, packed_mask, scoring_strategy, slots,
                                 strategy_note)
from mmrl.models.sequence_scoring import check_item, tail_vision, trained_tokens


def P(*ids):
    return PromptInputs(input_ids=torch.tensor(ids))


# ---- the layout rule ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("prompt_tokens, n, w, name", [
    (70, 0, 4, "expand"), (70, 1, 4, "expand"), (70, 1, 1000, "expand"),
    (70, 2, 192, "packed"), (70, 2, 193, "expand"), (70, 8, 27, "packed"), (70, 8, 28, "expand"),
    (70, 193, 1, "packed"), (70, 194, 1, "expand"), (70, 193, 0, "packed"), (70, 194, 0, "expand"),  # W >= 1
    (10 ** 6, 4, 64, "packed"), (0, 4, 65, "expand"),
])
def test_scoring_strategy_packs_while_the_extra_keys_stay_within_192(prompt_tokens, n, w, name):
    assert PACKED_MAX_EXTRA_KEYS == 192
    assert scoring_strategy(prompt_tokens, n, w) == name


@pytest.mark.parametrize("n, w, note", [
    (1, 16, "shared-prompt layout: expand (a single response per prompt; packed = responses side by side in the "
            "prompt's row, expand = the prompt's KV cache gathered per response)"),
    (8, 24, "shared-prompt layout: packed ((n-1) x max_new_tokens = 168 <= 192; packed = responses side by side in "
            "the prompt's row, expand = the prompt's KV cache gathered per response)"),
    (8, 28, "shared-prompt layout: expand ((n-1) x max_new_tokens = 196 > 192; packed = responses side by side in "
            "the prompt's row, expand = the prompt's KV cache gathered per response)"),
    (2, 100, "shared-prompt layout: packed ((n-1) x max_new_tokens = 100 <= 192; packed = responses side by side in "
             "the prompt's row, expand = the prompt's KV cache gathered per response)"),
    (3, 96, "shared-prompt layout: packed ((n-1) x max_new_tokens = 192 <= 192; packed = responses side by side in "
            "the prompt's row, expand = the prompt's KV cache gathered per response)"),
])
def test_strategy_note_is_written_out_whole(n, w, note):
    assert strategy_note(n, w) == note


def test_a_chunk_is_ruled_by_its_largest_group_and_longest_response():
    a, b = P(1, 2, 3), P(4, 5)
    r = lambda n: torch.zeros(n, dtype=torch.long)
    # group of 3 on a, longest response 97 anywhere: (3-1) x 97 = 194 > 192
    assert _chunk_strategy([(a, r(2)), (b, r(97)), (a, r(2)), (a, r(2))]) == "expand"
    assert _chunk_strategy([(a, r(2)), (b, r(96)), (a, r(2)), (a, r(2))]) == "packed"  # 2 x 96 = 192
    assert _chunk_strategy([(a, r(500)), (b, r(500))]) == "expand"  # groups of one
    assert _chunk_strategy([(a, r(192)), (a, r(1))]) == "packed"


def test_slots_rank_items_within_their_prompt():
    assert slots(torch.tensor([0, 1, 0, 2, 1, 0])).tolist() == [0, 0, 1, 0, 1, 2]
    assert slots(torch.tensor([3, 3, 3])).tolist() == [0, 1, 2]
    assert slots(torch.tensor([], dtype=torch.long)).tolist() == []


def test_packed_mask_sees_the_prompts_real_tokens_and_its_own_earlier_tokens():
    pm = torch.tensor([[1, 1, 0], [1, 1, 1]])
    m = packed_mask(pm, 2, 2)
    assert m.shape == (2, 1, 4, 7) and m.dtype == torch.bool
    own = [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    assert m[0, 0].int().tolist() == [[1, 1, 0] + row for row in own]
    assert m[1, 0].int().tolist() == [[1, 1, 1] + row for row in own]
    assert packed_mask(torch.tensor([[1]]), 1, 3)[0, 0].int().tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]


# ---- positions and padding ----------------------------------------------------------------------------------------

def test_positions_count_from_each_start_on_all_three_axes():
    pos = positions(torch.tensor([0, 5]), 3)
    assert pos.shape == (3, 2, 3) and pos[0].tolist() == [[0, 1, 2], [5, 6, 7]]
    assert torch.equal(pos[1], pos[0]) and torch.equal(pos[2], pos[0])


def test_prompt_rope_of_a_text_prompt_is_an_arange_and_is_kept():
    p = P(7, 8, 9)
    pos, nxt = prompt_rope(None, p)
    assert pos.tolist() == [[0, 1, 2]] * 3 and nxt == 3 and isinstance(nxt, int)
    assert p.rope is not None and prompt_rope(None, p)[0] is pos
    p.rope = (torch.full((3, 3), 4), 9)  # a kept value is returned as it is
    assert prompt_rope(None, p)[1] == 9


def test_prompt_positions_pad_with_one_and_give_the_next_position():
    a, b = P(1, 2, 3), P(4)
    b.rope = (torch.tensor([[0], [0], [0]]), 5)
    ids = torch.tensor([[1, 2, 3], [4, 0, 0]])
    pos, nxt = prompt_positions(None, [a, b], ids)
    assert pos.shape == (3, 2, 3) and pos[0].tolist() == [[0, 1, 2], [0, 1, 1]] and nxt.tolist() == [3, 5]
    assert pos.dtype == torch.long and nxt.dtype == torch.long


def test_sequence_positions_continue_after_the_prompt_and_pad_with_one():
    a, b = P(1, 2), P(3, 4, 5)
    b.rope = (torch.tensor([[0, 1, 1]] * 3), 7)
    out = sequence_positions(None, [a, b], [3, 1], 6, "cpu")
    assert out.shape == (3, 2, 6) and out[0].tolist() == [[0, 1, 2, 3, 4, 1], [0, 1, 1, 7, 1, 1]]
    assert torch.equal(out[2], out[0])


def test_unique_prompts_by_object_in_first_seen_order():
    a, b, c = P(1), P(1), P(2)
    uniq, owner = unique_prompts([b, a, b, c, a])
    assert uniq[0] is b and uniq[1] is a and uniq[2] is c and len(uniq) == 3
    assert owner.tolist() == [0, 1, 0, 2, 1] and owner.dtype == torch.long


def test_right_padded_ids_lengths_and_mask():
    ids, lengths, mask = right_padded([P(1, 2, 3), P(4)], 9, "cpu")
    assert ids.tolist() == [[1, 2, 3], [4, 9, 9]] and lengths.tolist() == [3, 1]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]] and mask.dtype == torch.long and lengths.dtype == torch.long


# ---- switches ----------------------------------------------------------------------------------------------------

class _Ckpt:
    is_activation_checkpointing = False


@pytest.mark.parametrize("model, cache", [
    (SimpleNamespace(training=False, is_gradient_checkpointing=True), True),
    (SimpleNamespace(training=True, is_gradient_checkpointing=True), False),
    (SimpleNamespace(training=True, is_gradient_checkpointing=False), True),
    (SimpleNamespace(training=True), True),
])
def test_can_cache_is_false_only_when_training_with_gradient_checkpointing(model, cache):
    assert can_cache(model) is cache


def test_can_cache_reads_is_activation_checkpointing_where_the_class_has_it():
    m = _Ckpt()
    m.training, m.is_gradient_checkpointing = True, True
    assert can_cache(m) is True  # the class's own flag says no checkpointing
    m.is_activation_checkpointing = True
    assert can_cache(m) is False


@pytest.mark.parametrize("impl, flash", [("flash_attention_2", True), ("sdpa", False), ("eager", False), (None, False)])
def test_uses_flash_and_can_share(impl, flash):
    m = SimpleNamespace(training=False, config=SimpleNamespace(_attn_implementation=impl))
    assert uses_flash(m) is flash and can_share(m) is (not flash)
    assert uses_flash(SimpleNamespace()) is False
    m.training, m.is_gradient_checkpointing = True, True
    assert can_share(m) is False


def test_backbone_reads_through_a_peft_wrapper():
    cfg = SimpleNamespace(vision_start_token_id=3, video_token_id=7)
    base = SimpleNamespace(model="core", lm_head="head", config=cfg)
    for m in (base, SimpleNamespace(get_base_model=lambda: base, model="wrapper", lm_head="x")):
        core, head = backbone(m)
        assert core == "core" and head.head == "head" and head.excluded == [3, 4, 5, 6, 7]


def test_the_policy_head_excludes_the_vision_tokens_and_scores_them_only_unrestricted():
    """log pi over the support: the excluded logits at -inf, the rest renormalised (hand-computed on 4 words); an
    excluded target (an observation's vision token, never sampled) gets the unrestricted head's log-prob."""
    from mmrl.models.policy_head import PolicyHead
    from mmrl.models.prefill import token_logprobs

    lin = torch.nn.Linear(1, 4, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[0.0], [1.0], [2.0], [3.0]]))
    head = PolicyHead(lin, [3])
    lp = token_logprobs(head, torch.ones(1, 1), torch.tensor([2]), 1.0)
    expect = 2.0 - math.log(math.exp(0) + math.exp(1) + math.exp(2))  # word 3 (logit 3) is outside the support
    assert abs(float(lp[0]) - expect) < 1e-6
    both = token_logprobs(head, torch.ones(2, 1), torch.tensor([2, 3]), 1.0)
    full = math.log(sum(math.exp(z) for z in (0, 1, 2, 3)))
    assert abs(float(both[0]) - expect) < 1e-6 and abs(float(both[1]) - (3.0 - full)) < 1e-6


# ---- the LM head ------------------------------------------------------------------------------------------------

def _lp(logits, t, T):
    return torch.log_softmax(logits / T, -1)[t]


def test_head_logprobs_at_t_only_at_real_tokens():
    head = torch.nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    hidden = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [3.0, 1.0]], [[0.5, 0.5], [9.0, 9.0], [9.0, 9.0]]])
    resp = [torch.tensor([2, 0, 1]), torch.tensor([1])]
    rlen = torch.tensor([3, 1])
    out = head_logprobs(head, hidden, resp, rlen, 0.5, 7)
    want0 = [_lp(torch.tensor([1.0, 0.0, 1.0]), 2, 0.5), _lp(torch.tensor([0.0, 2.0, 2.0]), 0, 0.5),
             _lp(torch.tensor([3.0, 1.0, 4.0]), 1, 0.5)]
    assert torch.allclose(out[0], torch.stack(want0)) and out[0].dtype == torch.float32
    assert torch.allclose(out[1], _lp(torch.tensor([0.5, 0.5, 1.0]), 1, 0.5).view(1))
    trained = [torch.tensor([True, False, True]), torch.tensor([False])]
    masked = head_logprobs(head, hidden, resp, rlen, 0.5, 7, trained)
    assert torch.allclose(masked[0], torch.stack([want0[0], torch.tensor(0.0), want0[2]]))
    assert masked[1].tolist() == [0.0]
    calls = []
    counting = lambda h: calls.append(h.shape[0]) or head(h)
    head_logprobs(counting, hidden, resp, rlen, 1.0, 7, trained)
    assert calls == [2]  # only the trained real tokens go through the head


# ---- multi-turn checks and tail vision ----------------------------------------------------------------------------

def _seq(n_resp, prompt_len=3, trained=None, **kw):
    return SequenceInputs(input_ids=torch.arange(prompt_len + n_resp), prompt_len=prompt_len, trained=trained, **kw)


def test_check_item_wants_the_sequences_tail():
    s = _seq(4)
    check_item(s, torch.tensor([3, 4, 5, 6]))
    for bad in (torch.tensor([3, 4, 5]), torch.tensor([3, 4, 5, 7])):
        with pytest.raises(ValueError) as e:
            check_item(s, bad)
        assert str(e.value) == (f"sequence item: response of {bad.numel()} tokens is not the sequence's tail after its "
                                "3-token prompt (4 tokens)")


def test_trained_tokens_default_to_all_and_must_match_the_response():
    assert trained_tokens(_seq(3)).tolist() == [True] * 3 and trained_tokens(_seq(3)).dtype == torch.bool
    assert trained_tokens(_seq(2, trained=torch.tensor([1, 0]))).tolist() == [True, False]
    with pytest.raises(ValueError) as e:
        trained_tokens(_seq(3, trained=torch.tensor([True, False])))
    assert str(e.value) == "sequence item: trained mask of 2 tokens for a 3-token response"


def test_tail_vision_is_what_follows_the_prompts_media():
    pv = {"pixel_values": torch.arange(8.0).view(8, 1), "image_grid_thw": torch.tensor([[1, 2, 4]])}
    full = {"pixel_values": torch.arange(14.0).view(14, 1), "image_grid_thw": torch.tensor([[1, 2, 4], [1, 2, 3]]),
            "pixel_values_videos": torch.arange(5.0).view(5, 1) + 100, "video_grid_thw": torch.tensor([[1, 1, 5]]),
            "second_per_grid_ts": torch.tensor([0.5])}
    out = tail_vision(_seq(1, vision=full, prompt=PromptInputs(torch.arange(3), vision=pv)))
    assert out["image_grid_thw"].tolist() == [[1, 2, 3]] and out["pixel_values"].flatten().tolist() == list(range(8, 14))
    assert out["video_grid_thw"].tolist() == [[1, 1, 5]] and out["pixel_values_videos"].flatten().tolist() == \
        [100.0, 101.0, 102.0, 103.0, 104.0]
    assert out["second_per_grid_ts"].tolist() == [0.5]
    # the prompt's own video comes first; the tail holds the second video and its seconds per grid step
    pvv = {"pixel_values_videos": torch.zeros(4, 1), "video_grid_thw": torch.tensor([[1, 2, 2]]),
           "second_per_grid_ts": torch.tensor([1.0])}
    fv = {"pixel_values_videos": torch.arange(10.0).view(10, 1), "video_grid_thw": torch.tensor([[1, 2, 2], [2, 1, 3]]),
          "second_per_grid_ts": torch.tensor([1.0, 2.0])}
    out = tail_vision(_seq(1, vision=fv, prompt=PromptInputs(torch.arange(3), vision=pvv)))
    assert sorted(out) == ["pixel_values_videos", "second_per_grid_ts", "video_grid_thw"]
    assert out["pixel_values_videos"].flatten().tolist() == [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    assert out["second_per_grid_ts"].tolist() == [2.0] and out["video_grid_thw"].tolist() == [[2, 1, 3]]
    # no media after the prompt: nothing
    assert tail_vision(_seq(1, vision=pvv, prompt=PromptInputs(torch.arange(3), vision=pvv))) == {}
    assert tail_vision(_seq(1, vision={}, prompt=PromptInputs(torch.arange(3)))) == {}
