"""Supervised warm-up on the same data: teacher-forced cross-entropy of the gold answer ``{letter}<|im_end|>``
(or of ``{meta.sft_response}<|im_end|>`` where a sample carries a reasoning trace, e.g. the claims world); with
``sft.turns``, of the model turns of scripted multi-turn tool episodes (``mmrl.tools.turn_sft``; loss on model
tokens only). In a streaming run (``rollout.agent_loop: stream``) it is masked SFT on the world oracle's
streams: the cross-entropy of the teacher's own turns (think updates, actions, recalls, memory lines),
observations masked, averaged over those tokens.

Needed before RL from a random init (the tiny model) and used by real users before RL. Prompt inputs are built
once per sample and reused across epochs (media decoded once per sample).
"""
from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional

import torch

from mmrl.config import Config, to_yaml
from mmrl.errors import DataError
from mmrl.media.decode import load_media
from mmrl.media.inputs import build_prompt_inputs
from mmrl.media.prompts import build_messages
from mmrl.models.loading import load_model_and_processor
from mmrl.train.checkpoint import load_checkpoint, save_checkpoint
from mmrl.train.data_stream import DataStream
from mmrl.train.interrupt import graceful_stop
from mmrl.train.preflight import preflight, preflight_log
from mmrl.train.run_dir import Resume, open_run
from mmrl.train.skips import check_loaded, skip_log_for
from mmrl.train.metrics import MetricsLogger, system_metrics
from mmrl.train.progress import StepProgress
from mmrl.train.optim import build_optimizer
from mmrl.train.precision import autocast_factory, check_training_precision, keep_fp32_master
from mmrl.train.rl_trainer import set_seed
from mmrl.models.policy_head import full_vocabulary
from mmrl.models.scoring import response_logprobs
from mmrl.rollout.step_inputs import budget_from, style_from


def answer_ids(tokenizer, text: str) -> torch.Tensor:
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return torch.tensor(tokenizer.encode(text, add_special_tokens=False) + [eos], dtype=torch.long)


def target_mask(item) -> torch.Tensor:
    """The trained tokens of an SFT item ``(inputs, response_ids[, loss_mask])``: all of a plain answer; a multi-turn
    teacher trajectory's own turns only (observations masked)."""
    mask = item[2] if len(item) > 2 else None
    return mask if mask is not None else torch.ones(item[1].numel(), dtype=torch.bool)


def teacher_items(cfg: Config, processor):
    """``sample -> (SequenceInputs, response_ids, loss_mask)`` of the oracle's stream when the run is a streaming run
    (``rollout.agent_loop: stream``): masked SFT on the teacher's actions, recalls and memory lines
    (``mmrl.stream.sft``); ``None`` otherwise (the loop's ``capabilities.sft_teacher``)."""
    from mmrl.rollout.agent_loop import loop_class

    if not loop_class(cfg.rollout.agent_loop).capabilities.sft_teacher:
        return None
    from mmrl.stream.sft import teacher_item_builder

    return teacher_item_builder(cfg, processor)


def sft_target(sample) -> str:
    """The SFT response: ``meta.sft_response`` where the sample carries a reasoning trace (the claims world), else
    the gold letter (multiple choice), the number, the list joined by ", ", or the text."""
    if sample.meta.get("sft_response"):
        return str(sample.meta["sft_response"])
    if sample.is_choice:
        return sample.answer_letter
    if sample.answer_type == "number":
        return f"{sample.answer:g}"
    if sample.answer_type == "list":
        return ", ".join(sample.answer)
    return str(sample.answer)


def run_sft(cfg: Config, quiet: bool = False, resume: Resume = False, overwrite: bool = False,
            checked: Optional[tuple] = None) -> List[Dict[str, float]]:
    """SFT for ``sft.steps`` steps, with the RL run's directory rules, checkpoints (``train.save_every``,
    ``train.keep_checkpoints``), exact ``resume``, SIGINT/SIGTERM checkpointing and skip accounting. ``checked``:
    the pre-flight's ``(samples, left out)`` when the caller ran it already (``mmrl sft``)."""
    check_training_precision(cfg, backend="torch")  # SFT trains in this one process
    samples, load_skipped = checked if checked is not None else \
        preflight(cfg, "sft", log=None if quiet else preflight_log())  # before any weights
    check_loaded(cfg.data, samples, load_skipped)
    set_seed(cfg.train.seed, cfg.train.num_threads)
    rd = open_run(cfg.train.out_dir, "sft", resume, overwrite)
    model, processor = load_model_and_processor(cfg.model)
    turn_items = None
    if cfg.sft.turns:  # multi-turn tool episodes (mmrl.tools.turn_sft): only the samples the scripts cover
        from mmrl.tools.turn_sft import TurnItems

        turn_items = TurnItems(cfg.sft.turns, cfg.rollout.tools, samples)
        samples = turn_items.samples(samples)
    out_dir = Path(cfg.train.out_dir)
    skips = skip_log_for(str(out_dir), cfg.data, samples, load_skipped, rd.resume_step)
    stream = DataStream(samples, cfg.train.seed, cfg.data.shuffle)
    stream.excluded = skips.excluded
    keep_fp32_master(model)
    opt, sched = build_optimizer(model, cfg.train, lr=cfg.sft.lr)
    budget, style = budget_from(cfg.data, processor), style_from(cfg.data)
    cache: Dict[str, tuple] = {}
    (out_dir / "config.yaml").write_text(to_yaml(cfg))
    start = 0
    if rd.checkpoint is not None:
        state = load_checkpoint(rd.checkpoint, model, opt, sched)
        start = int(state["step"])
        stream.load_state_dict(state["data"])
    logger = MetricsLogger(str(out_dir), resume_step=start, wandb_project=cfg.train.wandb_project,
                           config=asdict(cfg))
    pad_id = processor.tokenizer.pad_token_id
    autocast = autocast_factory(cfg.train.precision, next(model.parameters()).device)
    history = []

    teacher = teacher_items(cfg, processor)  # streaming runs: masked SFT on the oracle's streams

    def item(sample):
        """``(inputs, response ids, loss mask or None)``."""
        if teacher is not None:
            if sample.id not in cache:
                cache[sample.id] = teacher(sample)
            return cache[sample.id]
        if sample.id not in cache:
            media = load_media(sample, budget)
            msgs = build_messages(sample.question, sample.candidates, media, style)
            cache[sample.id] = (build_prompt_inputs(processor, msgs, media, max_prompt_tokens=cfg.data.max_prompt_tokens,
                                                    sample_id=sample.id), answer_ids(processor.tokenizer, sft_target(sample)))
        if turn_items is not None:
            from mmrl.rollout.base import RolloutRequest

            req = RolloutRequest(inputs=cache[sample.id][0], sample_id=sample.id, sample=sample)
            return turn_items.item(sample, req, processor, stream.epoch)
        return cache[sample.id] + (None,)

    def save(step: int) -> Path:
        return save_checkpoint(str(out_dir), step, model, opt, sched, {"data": stream.state_dict()},
                               keep=cfg.train.keep_checkpoints)

    model.train()
    run_start = time.time() - logger.elapsed_before
    with StepProgress(cfg.sft.steps, "sft", start=start, every_s=cfg.train.log_every_s, disable=quiet) as bar, \
            graceful_stop() as stop:
        for step in range(start + 1, cfg.sft.steps + 1):
            t0 = time.perf_counter()
            items, failed = [], []
            for s in stream.next(cfg.sft.batch_size):
                try:
                    items.append(item(s))
                except DataError as e:
                    if cfg.data.on_error != "skip":
                        raise
                    failed.append((s.id, str(e)))
            skips.add(failed, "sft", step)
            loss_sum = 0.0
            if items:
                opt.zero_grad(set_to_none=True)
                n_tok = sum(int(target_mask(it).sum()) for it in items)
                for i in range(0, len(items), cfg.train.micro_batch):
                    chunk = items[i : i + cfg.train.micro_batch]
                    with autocast(), full_vocabulary():  # SFT: cross-entropy over the whole vocabulary
                        lps = response_logprobs(model, [it[:2] for it in chunk], micro_batch=len(chunk), pad_id=pad_id,
                                                chunk_tokens=cfg.train.logprob_chunk_tokens)
                    loss = -sum((lp * target_mask(it).to(lp.dtype)).sum() for lp, it in zip(lps, chunk)) / max(n_tok, 1)
                    loss.backward()
                    loss_sum += float(loss.detach())
                torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.train.grad_clip)
                opt.step()
                sched.step()
            m = {"sft/loss": loss_sum} if items else {}  # no loss when every sample of the batch was skipped
            m.update({"skipped_samples": float(len(failed)), "skipped_total": float(len(skips.excluded)),
                      "time/step": time.perf_counter() - t0, **system_metrics(run_start)})
            logger.log(step, m)
            history.append({"step": step, **m})
            bar.update(step, m)
            if cfg.train.save_every and step % cfg.train.save_every == 0:
                save(step)
            stop.check(lambda: save(step), step, str(out_dir))
    save(cfg.sft.steps)
    logger.close()
    from mmrl.models.loading import export_merged

    export_merged(model, processor, str(out_dir / "final"))
    if skips.summary():
        print(skips.summary())
    return history
