"""Multi-turn SFT on scripted tool episodes (mmrl.tools.turn_sft, sft.turns): the seek world's teacher script
replays through the real tool loop (its seek returns the flash), only model tokens are trained, bad scripts are
errors naming the line, and ``mmrl sft`` with ``sft.turns`` trains on them."""
import json

import pytest
import torch

from mmrl.config import load_config
from mmrl.data.annotations import load_samples
from mmrl.data.synth_seek import make_seek_world
from mmrl.data.synth_video import PALETTE
from mmrl.errors import ConfigError, DataError
from mmrl.media.decode import load_media
from mmrl.media.inputs import build_prompt_inputs
from mmrl.media.prompts import build_messages
from mmrl.models.loading import load_processor
from mmrl.rollout.base import RolloutRequest
from mmrl.tools.suite import load_suite
from mmrl.tools.turn_sft import TurnItems, check_replay, replay

from support import REPO

SUITE = str(REPO / "tools" / "video_seek.yaml")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = tmp_path_factory.mktemp("seek_sft")
    make_seek_world(str(out), 3, 0, seed=0, duration=8.0, fps=4.0, flash_frames=2, overview=4, teacher_seek="exact")
    return out


def _request(proc, sample):
    media = load_media(sample)
    return RolloutRequest(inputs=build_prompt_inputs(proc, build_messages(sample.question, sample.candidates, media), media),
                          sample_id=sample.id, sample=sample)


def _scripts(world):
    return [json.loads(x) for x in (world / "teacher.jsonl").read_text().splitlines()]


def test_teacher_script_replays_with_the_flash_and_masks(world, tiny_model_path):
    proc = load_processor(tiny_model_path)
    samples = load_samples(str(world / "train.json"))[0]
    scripts = _scripts(world)
    trajs = replay(proc, load_suite(SUITE), [_request(proc, s) for s in samples], [r["turns"] for r in scripts])
    for t, s, rec in zip(trajs, samples, scripts):
        check_replay(t, rec["turns"], "test")
        assert [seg.kind for seg in t.segments] == ["model", "env", "model"] and t.text == s.answer_letter
        assert t.turns[0]["valid"] and t.turns[0]["interval"] == list(s.evidence.segments[0])
        frames = t.segments[1].media.frames.float()  # the seek's frames show the flash's colour
        colour = torch.tensor(PALETTE[s.answer], dtype=torch.float32).view(1, 3, 1, 1)
        assert float(((frames - colour).abs().max(dim=1).values < 40).float().mean()) > 0.3
        trained = sum(int(seg.ids.numel()) for seg in t.segments if seg.trained)
        tok = proc.tokenizer
        assert int(t.loss_mask.sum()) == trained == sum(len(tok.encode(x, add_special_tokens=False)) + 1 for x in rec["turns"])
        assert not t.loss_mask[t.segments[0].ids.numel():][: t.segments[1].ids.numel()].any()


def test_bad_scripts_name_their_line(world, tiny_model_path, tmp_path):
    proc = load_processor(tiny_model_path)
    samples = load_samples(str(world / "train.json"))[0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "train-00000", "turns": ["A"]}\n{"id": "nope", "turns": ["A"]}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: sample 'nope'"):
        TurnItems(str(bad), SUITE, samples)
    bad.write_text('{"id": "train-00000", "turns": "A"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:1: a script is"):
        TurnItems(str(bad), SUITE, samples)
    bad.write_text('{"id": "train-00000", "turns": ["<tool_call>{\\"name\\": \\"video_seek\\", \\"arguments\\": '
                   '{\\"start\\": 99, \\"end\\": 100}}</tool_call>", "A"]}\n')
    items = TurnItems(str(bad), SUITE, samples)
    with pytest.raises(DataError, match=r"bad.jsonl:1 \(sample train-00000\): the tools refuse call 0 .*out_of_range"):
        items.item(samples[0], _request(proc, samples[0]), proc, 0)
    with pytest.raises(ConfigError, match="sft.turns.*rollout.tools"):
        TurnItems(str(bad), None, samples)
    with pytest.raises(ConfigError, match="config key 'sft.turns' needs rollout.tools"):
        load_config([], [f"sft.turns={bad}"])


def test_mmrl_sft_trains_on_the_teacher_turns(world, tiny_model_path, tmp_path):
    from mmrl.train.sft import run_sft

    cfg = load_config([], [f"model.path={tiny_model_path}", f"data.train={world / 'train.json'}", "data.max_pixels=3136",
                           "rollout.agent_loop=multi_turn", f"rollout.tools={SUITE}", f"sft.turns={world / 'teacher.jsonl'}",
                           "sft.steps=6", "sft.batch_size=3", "sft.lr=3e-3", f"train.out_dir={tmp_path / 'sft'}"])
    hist = run_sft(cfg, quiet=True)
    losses = [h["sft/loss"] for h in hist]
    assert len(losses) == 6 and losses[-1] < losses[0]  # the same 3 episodes every step: the NLL falls
    assert (tmp_path / "sft" / "final").exists()


def test_a_script_as_long_as_max_turns_replays(world, tiny_model_path):
    """The suite's last turn is not shown to the environment (the episode ends on max_turns): an answer there is a
    complete script; a call there is not."""
    proc = load_processor(tiny_model_path)
    sample = load_samples(str(world / "train.json"))[0][0]
    (t0, t1), = sample.evidence.segments
    look = '<tool_call>{"name": "video_seek", "arguments": {"start": %s, "end": %s}}</tool_call>'
    suite = load_suite(SUITE)  # max_turns 3
    full = [look % (t0, t1), look % (t0, t1), sample.answer_letter]
    (t,) = replay(proc, suite, [_request(proc, sample)], [full])
    assert t.turns[-1]["end"] == "max_turns"
    check_replay(t, full, "test")
    cut = [look % (t0, t1), look % (t0, t1), look % (t0, t1)]
    (t,) = replay(proc, suite, [_request(proc, sample)], [cut])
    with pytest.raises(DataError, match="ends the episode after 3 of the script's 3 turns"):
        check_replay(t, cut, "test")
