"""What a multi-turn episode hands the engine when it keeps its KV cache (``Episode.tail``), on hand-built segments:
exactly the tokens after the ``kv.seen`` the cache holds, their token types (0 where a segment has none), and the
vision tensors of every media segment among them, in order; a cut inside a text segment is fine, a cut inside the
prompt or inside a media observation, or nothing left to continue from, is a ``ValueError`` naming the sample."""
from types import SimpleNamespace

import pytest
import torch

from mmrl.data.schema import Segment
from mmrl.media.inputs import PromptInputs
from mmrl.rollout.agent_loop_multi import Episode

PROMPT = PromptInputs(input_ids=torch.arange(100, 105, dtype=torch.int32))  # 5 tokens, positions 0-4


def _img(tag: float, rows: int):
    return {"pixel_values": torch.full((rows, 3), tag), "image_grid_thw": torch.tensor([[1, 2, rows // 2]])}


def _episode(seen: int) -> Episode:
    segs = [
        Segment("model", torch.tensor([1, 2, 3])),                                        # 5-7, no types
        Segment("env", torch.tensor([4, 9, 9, 5]), mm_token_type_ids=torch.tensor([0, 1, 1, 0]),
                vision=_img(1.0, 2)),                                                       # 8-11, one image
        Segment("model", torch.tensor([6, 7])),                                           # 12-13
        Segment("env", torch.tensor([8, 9, 9, 9, 9]), mm_token_type_ids=torch.tensor([0, 1, 1, 1, 1]),
                vision=_img(2.0, 4)),                                                       # 14-18, another image
    ]
    return Episode(request=0, pack=0, env=None, sample_id="s7", prompt=PROMPT, segments=segs,
                   kv=SimpleNamespace(seen=seen))


CASES = [  # kv.seen -> (ids, types, pixel tags in order)
    (5, ([1, 2, 3, 4, 9, 9, 5, 6, 7, 8, 9, 9, 9, 9], [0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1], [1.0, 2.0])),
    (6, ([2, 3, 4, 9, 9, 5, 6, 7, 8, 9, 9, 9, 9], [0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1], [1.0, 2.0])),
    (8, ([4, 9, 9, 5, 6, 7, 8, 9, 9, 9, 9], [0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1], [1.0, 2.0])),  # at a segment's start
    (12, ([6, 7, 8, 9, 9, 9, 9], [0, 0, 0, 1, 1, 1, 1], [2.0])),
    (13, ([7, 8, 9, 9, 9, 9], [0, 0, 1, 1, 1, 1], [2.0])),
    (14, ([8, 9, 9, 9, 9], [0, 1, 1, 1, 1], [2.0])),
]


@pytest.mark.parametrize("seen,expected", CASES)
def test_the_tail_is_exactly_what_the_cache_has_not_seen(seen, expected):
    ids, types, tags = expected
    tail = _episode(seen).tail()
    assert tail.input_ids.tolist() == ids and tail.input_ids.dtype == torch.int32
    assert tail.mm_token_type_ids.tolist() == types
    pix = tail.vision.get("pixel_values", torch.zeros(0, 3))
    assert [float(t) for t in pix[:, 0].unique_consecutive()] == tags
    assert pix.shape[0] == {(1.0, 2.0): 6, (2.0,): 4}[tuple(tags)]
    assert tail.vision["image_grid_thw"].tolist() == [[1, 2, 1], [1, 2, 2]][-len(tags):]


@pytest.mark.parametrize("seen,message", [
    (4, "episode of sample s7: the kept cache (4 tokens) ends inside the prompt (5 tokens)"),
    (9, "episode of sample s7: the kept cache ends inside an observation with media"),
    (15, "episode of sample s7: the kept cache ends inside an observation with media"),
    (19, "episode of sample s7 has no new tokens to continue from"),
])
def test_a_cache_that_cannot_be_continued_is_refused_naming_the_sample(seen, message):
    with pytest.raises(ValueError) as e:
        _episode(seen).tail()
    assert str(e.value) == "multi_turn: " + message


def test_the_episode_counts_the_prompt_and_every_segment():
    assert _episode(5).num_tokens == 19
