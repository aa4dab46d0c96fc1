"""The TRL arm of ``bench/vs_trl.py``: TRL's ``GRPOTrainer`` on the same tiny Qwen2.5-VL and synthetic image task.

Run by ``vs_trl.py`` in a fresh subprocess (``run_trl(spec) -> dict``). Equal work to the mmrl arm:

- the same checkpoint folder, loaded with ``Qwen2_5_VLForConditionalGeneration`` + ``AutoProcessor`` (left padding);
- the same prompts: mmrl's own ``build_messages`` text (question, options, instruction) with the image placeholder
  first, the same 56x56 PNGs (TRL's processor leaves them at 56x56: 16 patches, 4 image tokens, as in mmrl);
- ``prompts_per_step`` prompts x ``n`` generations per optimizer step (``per_device_train_batch_size = micro_batch``,
  ``gradient_accumulation_steps = steps_per_generation = prompts*n / micro_batch``, so one generation and one
  AdamW step per step, as in mmrl), ``max_completion_length``, temperature, top_p 1, top_k off;
- rewards equal to mmrl's ``accuracy`` (weight 1) and ``format`` (weight 0.1), using ``mmrl.rewards.parsing``;
- loss ``grpo`` (per-sequence token mean = mmrl ``seq-mean-token-mean``), group std scaling, clip 0.2, beta 0 (no
  reference model), AdamW at a constant learning rate, grad clip, fp32 on CPU.

Time split (seconds per step), by wrapping TRL's own methods: ``gen`` = ``_generate`` (prompt tokenization,
``model.generate``, decoding); ``score`` = the rest of ``_generate_and_score_completions`` (the second processor
pass for the image tensors, rewards, advantages, any old/ref log-prob pass); ``update`` = the rest of the step
(loss forward/backward, clip, AdamW, the dataloader and logging between steps).
"""
from __future__ import annotations

import json
import resource
import time
from typing import Dict, List

from _tree_rss import children_hwm_kb


def _dataset(world: str, media_root: str):
    from datasets import Dataset
    from PIL import Image

    from mmrl.data.schema import LETTERS
    from mmrl.media.prompts import PromptStyle, format_options

    style = PromptStyle()
    rows = []
    for it in json.load(open(f"{world}/train.json")):
        text = it["question"] + "\nOptions:\n" + format_options(it["candidates"], style.option_format) + "\n" + style.instruction
        rows.append({
            "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}],
            "image": Image.open(f"{media_root}/{it['image']}").convert("RGB"),
            "gold": LETTERS[it["candidates"].index(it["answer"])] if it["answer"] in it["candidates"] else it["answer"],
            "letters": LETTERS[: len(it["candidates"])],
        })
    return Dataset.from_list(rows)


def _rewards(eos_id: int, max_new: int):
    from mmrl.rewards.parsing import is_well_formed, parse_choice

    def _text(c):
        return c[0]["content"] if isinstance(c, list) else c

    def accuracy(prompts, completions, gold, letters, **kw) -> List[float]:
        return [1.0 if parse_choice(_text(c), l) == g else 0.0 for c, g, l in zip(completions, gold, letters)]

    def format_reward(prompts, completions, letters, completion_ids, **kw) -> List[float]:
        out = []
        for c, l, ids in zip(completions, letters, completion_ids):
            truncated = not (len(ids) and ids[-1] == eos_id)
            out.append(1.0 if (not truncated and is_well_formed(_text(c), l)) else 0.0)
        return out

    return [accuracy, format_reward]


def run_trl(spec: Dict) -> Dict:
    import torch
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(spec["seed"])
    proc = AutoProcessor.from_pretrained(spec["model"])
    proc.tokenizer.padding_side = "left"
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(spec["model"], dtype=torch.float32)
    per_step = spec["prompts_per_step"] * spec["n"]
    mb = min(spec["micro_batch"], per_step)
    assert per_step % mb == 0 and mb % spec["n"] == 0, "micro_batch must divide prompts*n and be a multiple of n"
    ga = per_step // mb
    args = GRPOConfig(
        output_dir=spec["out"], use_cpu=True, bf16=False, fp16=False, report_to="none", save_strategy="no",
        logging_steps=1, disable_tqdm=True, max_steps=spec["steps"], seed=spec["seed"], dataloader_num_workers=0,
        per_device_train_batch_size=mb, gradient_accumulation_steps=ga, steps_per_generation=ga,
        num_generations=spec["n"], max_completion_length=spec["max_new_tokens"], temperature=spec["temperature"],
        top_p=1.0, top_k=0, learning_rate=spec["lr"], lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=spec["grad_clip"], optim="adamw_torch", loss_type="grpo", beta=0.0, epsilon=0.2,
        scale_rewards="group", reward_weights=[1.0, 0.1], mask_truncated_completions=False, log_completions=False,
        gradient_checkpointing=False,  # TRL's default is on; mmrl's is off: equal work means the same choice
    )
    eos_id = proc.tokenizer.convert_tokens_to_ids("<|im_end|>")
    trainer = GRPOTrainer(model=model, reward_funcs=_rewards(eos_id, spec["max_new_tokens"]), args=args,
                          train_dataset=_dataset(spec["world"], spec["world"]), processing_class=proc)

    acc = {"gen": 0.0, "gas": 0.0, "tokens": 0, "samples": 0, "prompt_tokens": None}
    ends: List[float] = []
    cpus: List[float] = []
    per_step: List[Dict[str, float]] = []
    rss_at_end = [0]
    children: Dict[int, int] = {}

    def wrap(name, key, count_tokens=False):
        fn = getattr(trainer, name)

        def timed(*a, **k):
            t = time.perf_counter()
            out = fn(*a, **k)
            acc[key] += time.perf_counter() - t
            if count_tokens:  # _generate returns (prompt_ids, completion_ids, ...)
                acc["tokens"] += sum(len(c) for c in out[1])
                acc["samples"] += len(out[1])
                if acc["prompt_tokens"] is None:
                    acc["prompt_tokens"] = sum(len(p) for p in out[0]) / max(1, len(out[0]))
            return out

        setattr(trainer, name, timed)

    wrap("_generate", "gen", count_tokens=True)
    wrap("_generate_and_score_completions", "gas")

    class Clock(TrainerCallback):
        def on_train_begin(self, *a, **k):
            ends.append(time.perf_counter())
            cpus.append(time.process_time())

        def on_step_end(self, *a, **k):
            now, cpu = time.perf_counter(), time.process_time()
            per_step.append({"step": now - ends[-1], "cpu": cpu - cpus[-1], "gen": acc["gen"], "score": acc["gas"] - acc["gen"],
                             "tokens": acc["tokens"], "samples": acc["samples"]})
            ends.append(now)
            cpus.append(cpu)
            acc.update(gen=0.0, gas=0.0, tokens=0, samples=0)
            rss_at_end[0] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            children_hwm_kb(children)  # TRL starts none that live: 0, measured like mmrl's

    trainer.add_callback(Clock())
    trainer.train()
    return {"per_step": per_step, "peak_rss_kb": rss_at_end[0], "prompt_tokens": acc["prompt_tokens"],
            "children_peak_rss_kb": sum(children.values()), "children": len(children)}
