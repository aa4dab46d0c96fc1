"""vLLM numbers M-RoPE positions itself from the prompt we send it; they must be ``mmrl.models.mrope``'s.

vLLM is not installed here: ``vllm_qwen2_positions`` / ``vllm_qwen3_positions`` re-implement vLLM 0.33.0's
``get_mrope_input_positions`` (``vllm/model_executor/models/qwen2_vl.py`` and ``qwen2_5_vl.py``: ``iter_mm_grid_thw``
then numpy ``np.indices`` blocks with ``(k * t_factor).astype(int64)``, text at the last block's max + 1;
``qwen3_vl.py``: ``_iter_mm_grid_hw`` finds each frame between ``<|vision_start|>`` and ``<|vision_end|>``), read from
the 0.33.0 wheel. ``vllm_view`` expands what ``mmrl.rollout.vllm_inputs.vllm_prompt`` sends as vLLM's processor
would (the HF processor: grid from the frames, ``second_per_grid_ts = temporal_patch_size / sampled_fps`` of each
video's metadata)."""
import math
import types

import numpy as np
import pytest
import torch

from mmrl.data.schema import Media
from mmrl.media.inputs import build_prompt_inputs, encode_texts
from mmrl.media.prompts import build_messages
from mmrl.models.loading import load_processor
from mmrl.models.mrope import CASES, RopeRule, mrope_positions, vision_positions, video_case
from mmrl.rollout.agent_loop import Observation
from mmrl.rollout.agent_loop_multi import observation_text, sequence_inputs
from mmrl.rollout.vllm_inputs import PLACEHOLDERS, vllm_prompt


def vllm_qwen2_positions(input_tokens, features, merge, tokens_per_second):
    """vLLM 0.33's Qwen2-VL / Qwen2.5-VL rule; ``features``: ``(offset, modality, (t, h, w), second_per_grid_ts)``."""
    llm_pos_ids_list, st = [], 0
    for offset, modality, (t, h, w), secs in sorted(features):
        if modality == "image":
            t_factor = 1.0
        else:
            t_factor = (secs if secs is not None else 1.0) * tokens_per_second
        gt, gh, gw = t, h // merge, w // merge
        text_len = offset - st
        st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
        llm_pos_ids_list.append(np.broadcast_to(np.arange(text_len), (3, text_len)) + st_idx)
        grid_indices = np.indices((gt, gh, gw))
        if t_factor != 1.0:
            grid_indices[0] = (grid_indices[0] * t_factor).astype(np.int64)
        llm_pos_ids_list.append(grid_indices.reshape(3, -1) + text_len + st_idx)
        st = offset + gt * gh * gw
    if st < len(input_tokens):
        st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
        text_len = len(input_tokens) - st
        llm_pos_ids_list.append(np.broadcast_to(np.arange(text_len), (3, text_len)) + st_idx)
    pos = np.concatenate(llm_pos_ids_list, axis=1).reshape(3, -1)
    return torch.from_numpy(pos), int(pos.max() + 1 - len(input_tokens))


def vllm_qwen3_positions(input_tokens, features, video_token_id, vs, ve, merge):
    """vLLM 0.33's Qwen3-VL rule (no EVS): every frame of a video is its own ``(1, H, W)`` block."""
    blocks = []
    for offset, modality, (t, h, w), _ in sorted(features):
        H, W = h // merge, w // merge
        if modality == "image":
            blocks.append((offset, H, W))
            continue
        for _ in range(t):
            offset = input_tokens.index(vs, offset)
            end = input_tokens.index(ve, offset)
            blocks.append((input_tokens.index(video_token_id, offset, end), H, W))
            offset = end + 1
    llm_pos_ids_list, st = [], 0
    for offset, H, W in blocks:
        text_len = offset - st
        st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
        llm_pos_ids_list.append(np.broadcast_to(np.arange(text_len), (3, text_len)) + st_idx)
        llm_pos_ids_list.append(np.indices((1, H, W)).reshape(3, -1) + text_len + st_idx)
        st = offset + H * W
    if st < len(input_tokens):
        st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
        llm_pos_ids_list.append(np.broadcast_to(np.arange(len(input_tokens) - st), (3, len(input_tokens) - st)) + st_idx)
    pos = np.concatenate(llm_pos_ids_list, axis=1).reshape(3, -1)
    return torch.from_numpy(pos), int(pos.max() + 1 - len(input_tokens))


IMG, VID, VS, VE = 1, 2, 3, 4
Q25 = RopeRule("qwen2_5_vl", image_token_id=IMG, video_token_id=VID, merge=2, tokens_per_second=2.0)


def _text(n):
    return [10 + i for i in range(n)]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_four_video_cases_and_an_image_equal_vllm(case):
    _, frames, fps, h, w = CASES[case]
    grid, secs = video_case(frames, fps, h, w)
    n = int(grid.prod()) // 4
    ids = _text(3) + [VS, IMG, IMG, IMG, IMG, VE] + _text(2) + [VS] + [VID] * n + [VE] + _text(4)
    ours, nxt = mrope_positions(torch.tensor(ids), Q25, image_grid_thw=torch.tensor([[1, 4, 4]]),
                                video_grid_thw=grid, second_per_grid_ts=secs)
    feats = [(4, "image", (1, 4, 4), None), (12, "video", tuple(grid[0].tolist()), float(secs[0]))]
    ref, delta = vllm_qwen2_positions(ids, feats, 2, 2.0)
    assert torch.equal(ours, ref) and nxt == delta + len(ids)


def test_multi_turn_sequence_with_two_videos_equals_vllm():
    ids = _text(2) + [VID] * 8 + _text(3) + [IMG] * 4 + _text(2) + [VID] * 16 + _text(2)
    vids, secs = torch.tensor([[2, 4, 4], [4, 4, 4]]), torch.tensor([7.5, 0.25])
    ours, nxt = mrope_positions(torch.tensor(ids), Q25, image_grid_thw=torch.tensor([[1, 4, 4]]),
                                video_grid_thw=vids, second_per_grid_ts=secs)
    feats = [(2, "video", (2, 4, 4), 7.5), (13, "image", (1, 4, 4), None), (19, "video", (4, 4, 4), 0.25)]
    ref, delta = vllm_qwen2_positions(ids, feats, 2, 2.0)
    assert torch.equal(ours, ref) and nxt == delta + len(ids)


def test_qwen2_vl_and_qwen3_vl_equal_vllm():
    q2 = RopeRule("qwen2_vl", image_token_id=IMG, video_token_id=VID, merge=2)
    ids = _text(1) + [VID] * 12 + _text(2)
    ours, _ = mrope_positions(torch.tensor(ids), q2, video_grid_thw=torch.tensor([[3, 4, 4]]))
    ref, _ = vllm_qwen2_positions(ids, [(1, "video", (3, 4, 4), None)], 2, 1.0)  # no tokens_per_second: 1.0
    assert torch.equal(ours, ref)
    q3 = RopeRule("qwen3_vl", image_token_id=IMG, video_token_id=VID, merge=2)
    frames = []
    for _ in range(3):  # <t seconds> <vs> frame <ve>, per frame pair
        frames += _text(3) + [VS] + [VID] * 6 + [VE]
    ids = _text(2) + [VS] + [IMG] * 4 + [VE] + frames + _text(2)
    ours, nxt = mrope_positions(torch.tensor(ids), q3, image_grid_thw=torch.tensor([[1, 4, 4]]),
                                video_grid_thw=torch.tensor([[3, 4, 6]]))
    ref, delta = vllm_qwen3_positions(ids, [(3, "image", (1, 4, 4), None), (8, "video", (3, 4, 6), None)],
                                      VID, VS, VE, 2)
    assert torch.equal(ours, ref) and nxt == delta + len(ids)


def vllm_view(prompt, proc):
    """The expanded token ids and the features vLLM's processor derives from ``vllm_prompt``'s output."""
    from transformers.video_utils import VideoMetadata

    tok = proc.tokenizer
    img_id, vid_id = (tok.convert_tokens_to_ids(t) for t in PLACEHOLDERS)
    data = prompt["multi_modal_data"]
    videos = data.get("video", [])
    videos = [videos] if isinstance(videos, tuple) else list(videos)
    images = data.get("image", [])
    images = [images] if isinstance(images, np.ndarray) else list(images)
    vp = proc.video_processor
    ids, feats = [], []
    for t in prompt["prompt_token_ids"]:
        if t not in (img_id, vid_id):
            ids.append(t)
            continue
        if t == vid_id:
            frames, meta = videos.pop(0)
            md = VideoMetadata(total_num_frames=meta["total_num_frames"], fps=meta["fps"],
                               frames_indices=meta["frames_indices"])
            grid = (math.ceil(frames.shape[0] / vp.temporal_patch_size), frames.shape[1] // 14, frames.shape[2] // 14)
            feats.append((len(ids), "video", grid, vp.temporal_patch_size / md.sampled_fps))
        else:
            im = images.pop(0)
            grid = (1, im.shape[0] // 14, im.shape[1] // 14)
            feats.append((len(ids), "image", grid, None))
        ids.extend([t] * (grid[0] * grid[1] * grid[2] // 4))
    return ids, feats


def _clip(seed, frames, seconds, h, w):
    g = torch.Generator().manual_seed(seed)
    fps = frames / seconds
    return Media(f"c{seed}", frames=torch.randint(0, 255, (frames, 3, h, w), dtype=torch.uint8, generator=g),
                 timestamps=[i / fps for i in range(frames)], fps=fps)


def test_the_prompts_we_send_vllm_give_our_positions(tiny_model_path):
    """A 16-frame 60-s clip prompt, and a multi-turn context adding an image and a 2-fps video (one video rate per
    video's metadata): vLLM's expansion is our token ids, its ``second_per_grid_ts`` ours, its positions ours."""
    proc = load_processor(tiny_model_path)
    from transformers import AutoConfig

    rule = RopeRule.from_config(AutoConfig.from_pretrained(tiny_model_path))
    holders = [proc.tokenizer.convert_tokens_to_ids(t) for t in PLACEHOLDERS]
    m = _clip(0, 16, 60.0, 448, 224)
    pi = build_prompt_inputs(proc, build_messages("What colour is the square?", ["red", "green"], m), m)
    g = torch.Generator().manual_seed(1)
    obs = [Observation("An image.", media=Media("i", image=torch.randint(0, 255, (3, 56, 84), dtype=torch.uint8,
                                                                        generator=g))),
           Observation("A clip.", media=_clip(2, 4, 2.0, 56, 112))]
    segs = []
    for o in obs:
        p = encode_texts(proc, [observation_text(proc, o)], [o.media])[0]
        segs.append(types.SimpleNamespace(ids=p.input_ids, mm_token_type_ids=p.mm_token_type_ids, vision=p.vision,
                                          media=o.media))
    ctx = sequence_inputs(pi, segs, for_scoring=False)
    for inputs in (pi, ctx):
        ids, feats = vllm_view(vllm_prompt(inputs, holders), proc)
        assert ids == inputs.input_ids.tolist()
        secs = [f[3] for f in sorted(feats) if f[1] == "video"]
        assert torch.equal(torch.tensor(secs, dtype=torch.float32), inputs.vision["second_per_grid_ts"].float())
        ref, delta = vllm_qwen2_positions(ids, feats, rule.merge, rule.tokens_per_second)
        ours, nxt = vision_positions(rule, inputs.input_ids, inputs.vision)
        assert torch.equal(ours, ref) and nxt == delta + len(ids)
    assert sorted(float(s) for s in ctx.vision["second_per_grid_ts"]) == [1.0, 7.5]


def test_a_real_qwen3_vl_prompt_equals_vllm_and_the_installed_transformers():
    """Qwen3-VL's own processor (timestamped per-frame-pair video blocks, patch 16): the module's positions equal
    vLLM 0.33's and the installed ``transformers``' ``Qwen3VLModel.get_rope_index`` (the two rules agree for it)."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    from transformers.video_utils import VideoMetadata

    from mmrl.models.mrope import installed_rope_index
    from mmrl.models.tiny import build_tokenizer

    tok = build_tokenizer(600)
    tid = tok.convert_tokens_to_ids
    proc = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2),
                            tokenizer=tok, video_processor=Qwen3VLVideoProcessor(patch_size=16, merge_size=2,
                                                                                 temporal_patch_size=2),
                            chat_template=tok.chat_template)
    cfg = Qwen3VLConfig(image_token_id=tid("<|image_pad|>"), video_token_id=tid("<|video_pad|>"),
                        vision_start_token_id=tid("<|vision_start|>"), vision_end_token_id=tid("<|vision_end|>"))
    rule = RopeRule.from_config(cfg)
    g = torch.Generator().manual_seed(0)
    text = "a b <|vision_start|><|video_pad|><|vision_end|> c <|vision_start|><|image_pad|><|vision_end|> d"
    out = proc(text=[text], videos=[torch.randint(0, 255, (8, 3, 64, 96), dtype=torch.uint8, generator=g)],
               images=[torch.randint(0, 255, (3, 64, 64), dtype=torch.uint8, generator=g)],
               video_metadata=[VideoMetadata(total_num_frames=8, fps=0.5, frames_indices=list(range(8)))],
               do_sample_frames=False, do_resize=False, return_tensors="pt")
    ids = out["input_ids"][0]
    assert out["video_grid_thw"].tolist() == [[4, 4, 6]] and "seconds>" in tok.decode(ids)
    ours, nxt = vision_positions(rule, ids, out)
    vs, ve = tid("<|vision_start|>"), tid("<|vision_end|>")
    toks = ids.tolist()
    feats = [(toks.index(vs), "video", (4, 4, 6), None), (toks.index(tid("<|image_pad|>")), "image", (1, 4, 4), None)]
    ref, delta = vllm_qwen3_positions(toks, feats, rule.video_token_id, vs, ve, 2)
    assert torch.equal(ours, ref) and nxt == delta + len(toks)
    theirs, d = installed_rope_index(rule, vs)(ids[None], mm_token_type_ids=out["mm_token_type_ids"],
                                               image_grid_thw=out["image_grid_thw"],
                                               video_grid_thw=out["video_grid_thw"], attention_mask=out["attention_mask"])
    assert torch.equal(theirs[:, 0], ours) and int(d) + len(toks) == nxt
