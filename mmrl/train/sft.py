"""Supervised warm-up on the same data: teacher-forced cross-entropy of the gold answer ``{letter}<|im_end|>``.

Needed before RL from a random init (the tiny model) and used by real users before RL. Prompt inputs are built
once per sample and reused across epochs (media decoded once per sample).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, List

import torch

from mmrl.config import Config, to_yaml
from mmrl.data.annotations import load_samples
from mmrl.errors import DataError
from mmrl.media.decode import load_media
from mmrl.media.inputs import build_prompt_inputs
from mmrl.media.prompts import build_messages
from mmrl.models.loading import load_model_and_processor
from mmrl.train.data_stream import DataStream
from mmrl.train.metrics import MetricsLogger, progress
from mmrl.train.optim import build_optimizer
from mmrl.train.precision import autocast_factory
from mmrl.train.rl_trainer import set_seed
from mmrl.models.scoring import response_logprobs
from mmrl.rollout.step_inputs import budget_from, style_from


def answer_ids(tokenizer, text: str) -> torch.Tensor:
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return torch.tensor(tokenizer.encode(text, add_special_tokens=False) + [eos], dtype=torch.long)


def sft_target(sample) -> str:
    """The SFT response: the gold letter (multiple choice), the number, the list joined by ", ", or the text."""
    if sample.is_choice:
        return sample.answer_letter
    if sample.answer_type == "number":
        return f"{sample.answer:g}"
    if sample.answer_type == "list":
        return ", ".join(sample.answer)
    return str(sample.answer)


def run_sft(cfg: Config, quiet: bool = False) -> List[Dict[str, float]]:
    set_seed(cfg.train.seed, cfg.train.num_threads)
    model, processor = load_model_and_processor(cfg.model)
    samples, skipped = load_samples(cfg.data.train, cfg.data.media_root, on_error=cfg.data.on_error)
    stream = DataStream(samples, cfg.train.seed, cfg.data.shuffle)
    opt, sched = build_optimizer(model, cfg.train, lr=cfg.sft.lr)
    budget, style = budget_from(cfg.data), style_from(cfg.data)
    cache: Dict[str, tuple] = {}
    bad: Dict[str, str] = {sid: why for sid, why in skipped}
    out_dir = Path(cfg.train.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.yaml").write_text(to_yaml(cfg))
    logger = MetricsLogger(str(out_dir))
    pad_id = processor.tokenizer.pad_token_id
    autocast = autocast_factory(cfg.train.precision, next(model.parameters()).device)
    history = []

    def item(sample):
        if sample.id not in cache:
            media = load_media(sample, budget)
            msgs = build_messages(sample.question, sample.candidates, media, style)
            cache[sample.id] = (build_prompt_inputs(processor, msgs, media, max_prompt_tokens=cfg.data.max_prompt_tokens,
                                                    sample_id=sample.id), answer_ids(processor.tokenizer, sft_target(sample)))
        return cache[sample.id]

    model.train()
    with progress(cfg.sft.steps, "sft", disable=quiet) as bar:
        task = bar.add_task("sft", total=cfg.sft.steps, info="")
        for step in range(1, cfg.sft.steps + 1):
            t0 = time.perf_counter()
            items = []
            for s in stream.next(cfg.sft.batch_size):
                if s.id in bad:
                    continue
                try:
                    items.append(item(s))
                except DataError as e:
                    if cfg.data.on_error != "skip":
                        raise
                    bad[s.id] = str(e)
            if not items:
                continue
            opt.zero_grad(set_to_none=True)
            n_tok = sum(int(r.numel()) for _, r in items)
            loss_sum = 0.0
            for i in range(0, len(items), cfg.train.micro_batch):
                chunk = items[i : i + cfg.train.micro_batch]
                with autocast():
                    lps = response_logprobs(model, chunk, micro_batch=len(chunk), pad_id=pad_id)
                loss = -torch.cat(lps).sum() / n_tok
                loss.backward()
                loss_sum += float(loss.detach())
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.train.grad_clip)
            opt.step()
            sched.step()
            m = {"sft/loss": loss_sum, "skipped_samples": float(len(bad)), "time/step": time.perf_counter() - t0}
            logger.log(step, m)
            history.append({"step": step, **m})
            bar.update(task, completed=step, info=f"loss {loss_sum:.3f}")
    logger.close()
    from mmrl.models.loading import export_merged

    export_merged(model, processor, str(out_dir / "final"))
    return history
