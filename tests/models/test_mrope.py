"""M-RoPE positions as the models were trained (``mmrl.models.mrope``): hand-computed tables, the offsets against the
installed ``transformers``' numbering, multi-turn tails, Qwen2-VL and Qwen3-VL (pure functions, no model)."""
import pytest
import torch

from mmrl.models.mrope import (RopeRule, batch_rope_index, installed_rope_index, mrope_positions, offsets_table,
                               video_case)

IMG, VID, VS, VE = 1, 2, 3, 4  # token ids of the synthetic sequences; text tokens are 10+
Q25 = RopeRule("qwen2_5_vl", image_token_id=IMG, video_token_id=VID, merge=2, tokens_per_second=2.0)


def _text(n):
    return [10 + i for i in range(n)]


def _table(pos):
    return [tuple(c) for c in pos.t().tolist()]


def test_small_sequence_by_hand():
    """``a b <image 1x4x4> c <video 2x4x4, 2 s per grid> d``: every position written out."""
    ids = torch.tensor(_text(2) + [IMG] * 4 + _text(1) + [VID] * 8 + _text(1))
    pos, nxt = mrope_positions(ids, Q25, image_grid_thw=torch.tensor([[1, 4, 4]]),
                               video_grid_thw=torch.tensor([[2, 4, 4]]), second_per_grid_ts=torch.tensor([2.0]))
    assert _table(pos) == [
        (0, 0, 0), (1, 1, 1),                                   # a b
        (2, 2, 2), (2, 2, 3), (2, 3, 2), (2, 3, 3),             # image: t 0, h 0..1, w 0..1 from 2
        (4, 4, 4),                                              # c: image max 3, + 1
        (5, 5, 5), (5, 5, 6), (5, 6, 5), (5, 6, 6),             # video frame pair 0: tau 0
        (9, 5, 5), (9, 5, 6), (9, 6, 5), (9, 6, 6),             # frame pair 1: tau = 1 x 2 s x 2 tokens/s = 4
        (10, 10, 10),                                           # d: video max 9, + 1
    ]
    assert nxt == 11


@pytest.mark.parametrize("case, grid, tau, after, after_transformers", [
    # <vs> video <ve>: 3 text tokens before; tau = floor(k * (2 / fps) * 2); the text after the video
    (0, (2, 12, 12), [0, 2], 3 + 6, 3 + 6),                      # 4 frames at 2 fps, 168x168: offset 0
    (1, (2, 12, 12), [0, 8], 3 + 9, 3 + 6),                      # 4 frames at 0.5 fps: offset 3
    (2, (4, 16, 16), [0, 4, 8, 12], 3 + 13, 3 + 8),              # 8 frames of 224x224 over 8 s: offset 5
    (3, (8, 32, 16), [0, 15, 30, 45, 60, 75, 90, 105], 3 + 106, 3 + 16),  # 16 frames of 448x224 over 60 s: 90
])
def test_the_four_video_cases_by_hand(case, grid, tau, after, after_transformers):
    from mmrl.models.mrope import CASES

    _, frames, fps, h, w = CASES[case]
    g, secs = video_case(frames, fps, h, w)
    assert g[0].tolist() == list(grid)
    T, H, W = grid[0], grid[1] // 2, grid[2] // 2
    ids = torch.tensor(_text(2) + [VS] + [VID] * (T * H * W) + [VE] + _text(2))
    pos, nxt = mrope_positions(ids, Q25, video_grid_thw=g, second_per_grid_ts=secs)
    s = 3  # the video's first token: a b <vs>
    assert _table(pos[:, :s]) == [(0, 0, 0), (1, 1, 1), (2, 2, 2)]
    assert _table(pos[:, s : s + T * H * W]) == [(s + tau[k], s + i, s + j)
                                                 for k in range(T) for i in range(H) for j in range(W)]
    assert _table(pos[:, s + T * H * W :]) == [(after + d,) * 3 for d in range(3)]  # <ve> a b
    assert nxt == after + 3
    # the installed transformers puts <ve> at start + max(H, W): the offset the issue measured
    fn = installed_rope_index(Q25, VS)
    theirs, _ = fn(ids[None], mm_token_type_ids=((ids == VID).long() * 2)[None], video_grid_thw=g,
                   second_per_grid_ts=secs, attention_mask=torch.ones_like(ids)[None])
    import transformers

    if transformers.__version__.startswith("5."):
        assert int(theirs[0, 0, s + T * H * W]) == after_transformers


def test_offsets_against_the_installed_transformers_are_0_3_5_90():
    """Fails if this module numbered like transformers 5.x (every offset would be 0); the demo's clips: 1."""
    import transformers

    rows = offsets_table()
    for name, ours, theirs, diff in rows:
        print(f"{name}: original {ours}, transformers {transformers.__version__} {theirs}, offset {diff}")
    if transformers.__version__.startswith("5."):
        assert [r[3] for r in rows] == [0, 3, 5, 90, 1]
    assert [r[1] for r in rows] == [1 + 6, 1 + 9, 1 + 13, 1 + 106, 1 + 3]  # <vs> at 0, the video from 1


def test_multi_turn_trajectory_with_a_tool_video_by_hand():
    """prompt (text, image, text) | model turn | tool result (text, video 2x4x8 at 0.5 fps, text) | model turn.
    Numbered whole, and tail by tail from each tail's next position (as the HF engine's multi-turn turns do)."""
    prompt = _text(2) + [IMG] * 4 + _text(2)            # image 1x4x4
    turn1 = _text(3)
    tool = _text(2) + [VID] * 16 + _text(1)             # video 2x4x8: H 2, W 4; 4 s per grid -> tau 0, 8
    turn2 = _text(2)
    ids = torch.tensor(prompt + turn1 + tool + turn2)
    img, vid, secs = torch.tensor([[1, 4, 4]]), torch.tensor([[2, 4, 8]]), torch.tensor([4.0])
    pos, nxt = mrope_positions(ids, Q25, image_grid_thw=img, video_grid_thw=vid, second_per_grid_ts=secs)
    video = [(s + t, s + i, s + j) for s in [11] for t in (0, 8) for i in range(2) for j in range(4)]
    assert _table(pos) == (
        [(0, 0, 0), (1, 1, 1), (2, 2, 2), (2, 2, 3), (2, 3, 2), (2, 3, 3), (4, 4, 4), (5, 5, 5)]  # prompt
        + [(6, 6, 6), (7, 7, 7), (8, 8, 8)]                                                   # model turn 1
        + [(9, 9, 9), (10, 10, 10)] + video + [(20, 20, 20)]                                 # tool: video max 19
        + [(21, 21, 21), (22, 22, 22)])                                                       # model turn 2
    assert nxt == 23
    # tail by tail: prompt from 0, then each tail's own numbering shifted to the running next position
    p_pos, p_next = mrope_positions(torch.tensor(prompt), Q25, image_grid_thw=img)
    t_pos, t_next = mrope_positions(torch.tensor(turn1 + tool), Q25, video_grid_thw=vid, second_per_grid_ts=secs,
                                    start=p_next)
    u_pos, u_next = mrope_positions(torch.tensor(turn2), Q25, start=t_next)
    assert torch.equal(torch.cat([p_pos, t_pos, u_pos], 1), pos) and u_next == nxt
    own, own_next = mrope_positions(torch.tensor(turn1 + tool), Q25, video_grid_thw=vid, second_per_grid_ts=secs)
    assert torch.equal(own + p_next, t_pos) and own_next + p_next == t_next  # translation: what hf_turns relies on


def test_qwen2_vl_numbers_frames_by_index():
    rule = RopeRule("qwen2_vl", image_token_id=IMG, video_token_id=VID, merge=2)
    ids = torch.tensor(_text(1) + [VID] * 6 + _text(1))  # video 6x2x2: T 6 > H, W 1: the text after starts at 1 + 6
    pos, nxt = mrope_positions(ids, rule, video_grid_thw=torch.tensor([[6, 2, 2]]),
                               second_per_grid_ts=torch.tensor([4.0]))  # ignored by Qwen2-VL
    assert pos[0, 1:7].tolist() == [1, 2, 3, 4, 5, 6] and pos[1:, 1:7].eq(1).all()
    assert _table(pos[:, 7:]) == [(7, 7, 7)] and nxt == 8


def _qwen3_video(frames, H, W, stamp=2):
    """Qwen3-VL's video text: per frame pair ``<t seconds>`` (``stamp`` text tokens), then ``<vs> frame <ve>``."""
    out = []
    for _ in range(frames):
        out += _text(stamp) + [VS] + [VID] * (H * W) + [VE]
    return out


def test_qwen3_vl_numbers_each_frame_as_its_own_block_like_transformers():
    rule = RopeRule("qwen3_vl", image_token_id=IMG, video_token_id=VID, merge=2)
    ids = torch.tensor(_text(2) + [VS] + [IMG] * 4 + [VE] + _qwen3_video(3, 2, 3) + _text(2))
    img, vid = torch.tensor([[1, 4, 4]]), torch.tensor([[3, 4, 6]])
    pos, nxt = mrope_positions(ids, rule, image_grid_thw=img, video_grid_thw=vid)
    first = 2 + 1 + 4 + 1 + 2 + 1  # a b <vs> image <ve> <t> <vs>: the first frame's first token
    assert _table(pos[:, first : first + 6]) == [(9, 9 + i, 9 + j) for i in range(2) for j in range(3)]
    assert _table(pos[:, first + 6 : first + 9]) == [(12, 12, 12), (13, 13, 13), (14, 14, 14)]  # <ve> <t> of frame 2
    # Qwen3-VL's frames carry no temporal extent: transformers 5.x agrees with the original rule here
    fn = installed_rope_index(rule, VS)
    mm = (ids == IMG).long() + (ids == VID).long() * 2
    theirs, delta = fn(ids[None], mm_token_type_ids=mm[None], image_grid_thw=img, video_grid_thw=vid,
                       attention_mask=torch.ones_like(ids)[None])
    assert torch.equal(theirs[:, 0], pos) and int(delta) + ids.numel() == nxt


def test_batch_rope_index_handles_left_padding_and_row_order():
    a = torch.tensor(_text(1) + [VID] * 8 + _text(1))
    b = torch.tensor(_text(3) + [IMG] * 4 + _text(1))
    ids = torch.zeros((2, 12), dtype=torch.long)
    mask = torch.zeros_like(ids)
    ids[0, 2:], mask[0, 2:] = a, 1
    ids[1, 4:], mask[1, 4:] = b, 1
    vid, secs, img = torch.tensor([[2, 4, 4]]), torch.tensor([3.0]), torch.tensor([[1, 4, 4]])
    pos, delta = batch_rope_index(Q25, ids, image_grid_thw=img, video_grid_thw=vid, second_per_grid_ts=secs,
                                  attention_mask=mask)
    pa, na = mrope_positions(a, Q25, video_grid_thw=vid, second_per_grid_ts=secs)
    pb, nb = mrope_positions(b, Q25, image_grid_thw=img)
    assert torch.equal(pos[:, 0, 2:], pa) and torch.equal(pos[:, 1, 4:], pb) and pos[:, :, :2].eq(1).all()
    assert delta.view(-1).tolist() == [na - a.numel(), nb - b.numel()]


def test_mismatched_grids_are_refused():
    ids = torch.tensor(_text(1) + [VID] * 8 + _text(1))
    with pytest.raises(ValueError, match="more video blocks"):
        mrope_positions(ids, Q25)
    with pytest.raises(ValueError, match="not 12 placeholder tokens"):
        mrope_positions(ids, Q25, video_grid_thw=torch.tensor([[3, 4, 4]]))
    with pytest.raises(ValueError, match="more grids given"):
        mrope_positions(ids, Q25, video_grid_thw=torch.tensor([[2, 4, 4], [2, 4, 4]]))
    with pytest.raises(ValueError, match="model_type 'llava'"):
        RopeRule.from_config(type("C", (), {"model_type": "llava"})())
