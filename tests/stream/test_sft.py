"""Masked SFT from teacher streams (issue 18): the trained tokens are the oracle's own turns (think, action, recall,
memory lines), observations are masked, and ``mmrl sft`` on a streaming run minimises exactly that loss."""
import json
import os

import pytest
import torch

from mmrl.config import load_config


@pytest.fixture(scope="module")
def stream_train(tmp_path_factory):
    from mmrl.data.annotations import save_samples
    from mmrl.data.synth_stream import make_stream_world
    from mmrl.stream.config import load_stream_config
    from mmrl.stream.ovo import block_samples

    out = tmp_path_factory.mktemp("stream_sft")
    info = make_stream_world(str(out), 1, 0, seed=3)
    items = json.load(open(info["ovo_train"]))
    samples = block_samples(items, info["video_root"], load_stream_config(), json.load(open(info["oracle_train"])))
    save_samples(samples[:2], str(out / "train_blocks.json"))
    return out / "train_blocks.json"


def _cfg(train, model, out, steps):
    return load_config(None, [f"model.path={model}", f"data.train={train}", "rollout.agent_loop=stream",
                              f"train.out_dir={out}", f"sft.steps={steps}", "sft.batch_size=2", "train.micro_batch=2",
                              "sft.lr=1e-3", "data.shuffle=false", "train.seed=0", "train.num_threads=1"])


def test_teacher_items_train_only_the_teachers_turns(stream_train, tiny_model_path):
    from mmrl.data.annotations import load_samples
    from mmrl.models.loading import load_model_and_processor
    from mmrl.stream.loop import record_of, teacher_trajectory
    from mmrl.stream.teacher import teacher_texts
    from mmrl.stream.sft import teacher_item_builder

    cfg = _cfg(stream_train, tiny_model_path, "/tmp/unused", 1)
    _, proc = load_model_and_processor(cfg.model)
    sample = load_samples(str(stream_train))[0][0]
    seq, ids, mask = teacher_item_builder(cfg, proc)(sample)
    assert mask.dtype == torch.bool and 0 < int(mask.sum()) < ids.numel()
    trained = proc.tokenizer.decode(ids[mask].tolist(), skip_special_tokens=False)
    texts = teacher_texts(record_of(teacher_trajectory(proc, [sample])[0]))
    assert trained == "".join(t + "<|im_end|>" for t in texts)  # every teacher turn, nothing else
    assert "<action>" in trained and "<memory>" in trained
    assert seq.input_ids.numel() == seq.prompt_len + ids.numel()


def test_sft_minimises_the_masked_teacher_loss(stream_train, tiny_model_path, tmp_path):
    from mmrl.data.annotations import load_samples
    from mmrl.models.loading import load_model_and_processor
    from mmrl.models.scoring import response_logprobs
    from mmrl.train.sft import run_sft
    from mmrl.stream.sft import teacher_item_builder

    cfg = _cfg(stream_train, tiny_model_path, tmp_path / "sft", 6)
    model, proc = load_model_and_processor(cfg.model)
    build = teacher_item_builder(cfg, proc)
    items = [build(s) for s in load_samples(str(stream_train))[0]]
    from mmrl.models.policy_head import full_vocabulary

    with torch.no_grad(), full_vocabulary():  # SFT's objective: the NLL over the whole vocabulary
        lps = response_logprobs(model, [it[:2] for it in items], micro_batch=2, pad_id=proc.tokenizer.pad_token_id)
    expected = -sum(float(lp[m].sum()) for lp, (_, _, m) in zip(lps, items)) / sum(int(m.sum()) for _, _, m in items)
    hist = run_sft(cfg, quiet=True)
    losses = [h["sft/loss"] for h in hist]
    assert losses[0] == pytest.approx(expected, rel=1e-4)  # the first step's loss: masked mean NLL of the teacher
    assert losses[-1] < losses[0] - 0.5, losses  # the same batch each step: it falls
    assert os.path.exists(tmp_path / "sft" / "final" / "config.json")
