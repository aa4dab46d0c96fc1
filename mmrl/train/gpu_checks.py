"""The checks ``scripts/gpu_smoke.sh`` runs on a GPU, as functions that also run (and are tested) on CPU.

Each returns a dict of numbers plus ``ok``; the script prints them as one table. Issue 26 items:
LoRA sync (``lora_sync_check``), precision (``precision_check``), gradient checkpointing with the shared-prefix
layouts (``checkpointing_check``), vLLM cache resets (``cache_reset_check``, needs vLLM), positions
(``positions_check``: ``mmrl.models.mrope`` when present).
"""
from __future__ import annotations

import contextlib
import importlib.util
import time
from typing import Callable, Dict, List, Sequence

import torch


def lora_sync_check(model, syncs: int = 50, dtype: torch.dtype = torch.bfloat16, step_std: float = 1e-3,
                    probe: Callable[[], torch.Tensor] | None = None) -> Dict[str, float]:
    """``syncs`` weight syncs of a peft model (adapter weights changed before each, as an optimizer step would):
    the base weights must stay bit-identical, every sent weight must equal ``(W + BA*alpha/r)_fp32`` cast to
    ``dtype``, and ``probe()`` (e.g. reference log-probs, run with the adapter disabled) must not change. Also the
    seconds one sync takes to compute the merged weights (``rollout_weights``) and their size."""
    from mmrl.rollout import weight_sync
    from mmrl.rollout.weight_sync import hf_name, lora_layers

    layers = lora_layers(model)
    if not layers:
        raise ValueError("lora_sync_check needs a peft LoRA model")
    base0 = {n: m.base_layer.weight.detach().clone() for n, m in layers.items()}
    with model.disable_adapter():
        ref0 = probe() if probe is not None else None
    worst, sync_s = 0.0, 0.0
    gen = torch.Generator().manual_seed(0)
    for _ in range(syncs):
        with torch.no_grad():
            for n, p in model.named_parameters():
                if ".lora_" in n:
                    p.add_((torch.randn(p.shape, generator=gen) * step_std).to(p.device, p.dtype))
        t0 = time.perf_counter()
        sent = dict(weight_sync.rollout_weights(model, dtype=dtype))
        if next(model.parameters()).is_cuda:
            torch.cuda.synchronize()
        sync_s += time.perf_counter() - t0
        for n, m in layers.items():
            a = m.active_adapters[0]
            want = (base0[n].float() + m.lora_B[a].weight.detach().float() @ m.lora_A[a].weight.detach().float()
                    * float(m.scaling[a])).to(dtype)
            got = sent[hf_name(n + ".weight")]
            worst = max(worst, float((got.float() - want.float()).abs().max()))
    changed = sum(int((m.base_layer.weight != base0[n]).sum()) for n, m in layers.items())
    ref_gap = 0.0
    if probe is not None:
        with model.disable_adapter():
            ref_gap = float((probe() - ref0).abs().max())
    merged_mb = sum(sent[hf_name(n + ".weight")].numel() * sent[hf_name(n + ".weight")].element_size()
                    for n in layers) / 2**20
    return {"syncs": syncs, "merge_seconds_per_sync": sync_s / syncs, "merged_MB": merged_mb,
            "base_entries_changed": changed, "sent_minus_formula": worst, "reference_gap": ref_gap,
            "ok": changed == 0 and worst == 0.0 and ref_gap == 0.0}


def changed_fraction(model, steps: int = 10, lr: float = 1e-6, master: bool = True,
                     batch: Callable[[], Dict[str, torch.Tensor]] | None = None, device: str = "cpu",
                     select: Callable[[str], bool] = lambda n: ".layers." in n and n.endswith("proj.weight")) -> float:
    """Share of the selected trainable entries that ``steps`` AdamW steps at ``lr`` change, under bf16 autocast,
    with fp32 master weights (``master``, mmrl's torch backend) or on the bf16 weights themselves (pure bf16)."""
    from mmrl.train.precision import keep_fp32_master

    if master:
        keep_fp32_master(model)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad and select(n)}
    start = {n: p.detach().clone() for n, p in params.items()}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.get_text_config().vocab_size
    for _ in range(steps):
        inputs = batch() if batch is not None else {"input_ids": torch.randint(0, vocab, (2, 24), generator=gen)}
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16):
            logits = model(**{k: v.to(device) for k, v in inputs.items()}).logits
        loss = torch.log_softmax(logits.float(), dim=-1)[..., 0].mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    moved = sum(int((p.detach() != start[n]).sum()) for n, p in params.items())
    return moved / max(1, sum(p.numel() for p in params.values()))


def precision_check(make_model: Callable[[], torch.nn.Module], device: str = "cpu", steps: int = 10,
                    lr: float = 1e-6) -> Dict[str, float]:
    """``changed_fraction`` of a bf16 model with fp32 master weights vs pure bf16 (the issue's 99.99% vs 1.9%)."""
    pure = changed_fraction(make_model(), steps, lr, master=False, device=device)
    master = changed_fraction(make_model(), steps, lr, master=True, device=device)
    return {"lr": lr, "steps": steps, "pure_bf16_changed": pure, "fp32_master_changed": master, "ok": master > 0.99}


def video_items(processor, prompts: int = 4, n: int = 8, length: int = 24, frames: int = 4, size: int = 56,
                fps: float = 2.0, seed: int = 0) -> List[tuple]:
    """``prompts`` random ``frames``-frame ``size``x``size`` videos x ``n`` random responses of ``length`` tokens:
    scoring items ``(PromptInputs, response ids)``; the ``n`` responses of a prompt share its object (as in a step)."""
    from mmrl.data.schema import Media
    from mmrl.media.inputs import build_prompt_inputs
    from mmrl.media.prompts import build_messages

    g = torch.Generator().manual_seed(seed)
    items = []
    for i in range(prompts):
        m = Media(str(i), frames=torch.randint(0, 255, (frames, 3, size, size), dtype=torch.uint8, generator=g),
                  timestamps=[k / fps for k in range(frames)], fps=fps)
        pi = build_prompt_inputs(processor, build_messages("What happens in the video?", ["A", "B"], m), m)
        items += [(pi, torch.randint(0, 500, (length,), generator=g)) for _ in range(n)]
    return items


@contextlib.contextmanager
def saved_bytes():
    """Bytes autograd keeps for backward inside the block (distinct storages; checkpointed layers keep none):
    ``with saved_bytes() as box: ...; box[0]``."""
    box, seen = [0], set()

    def pack(t):
        key = (t.untyped_storage().data_ptr(), t.device)
        if key not in seen:
            seen.add(key)
            box[0] += t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield box


def one_step(model, items: Sequence[tuple], pad_id: int, micro_batch: int = 64, strategy: str = "auto") -> Dict[str, object]:
    """Forward + backward of ``response_logprobs`` over ``items`` (one micro-batch each ``micro_batch``): log-probs,
    gradients, seconds, bytes saved for backward and, on a GPU, the peak allocated bytes of the step."""
    from mmrl.models.scoring import response_logprobs

    device = next(model.parameters()).device
    model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    t0 = time.perf_counter()
    lps, saved = [], 0
    for s in range(0, len(items), micro_batch):
        with saved_bytes() as box:
            out = response_logprobs(model, items[s : s + micro_batch], micro_batch=micro_batch, pad_id=pad_id,
                                    strategy=strategy)
        saved = max(saved, box[0])
        torch.cat(out).float().sum().backward()
        lps += [x.detach() for x in out]
    if device.type == "cuda":
        torch.cuda.synchronize()
    sec = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated(device) - base if device.type == "cuda" else None
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return {"lps": lps, "grads": grads, "seconds": sec, "saved_bytes": saved, "peak_bytes": peak}


def checkpointing_check(model, items: Sequence[tuple], pad_id: int, micro_batch: int = 64) -> Dict[str, float]:
    """One step without and with gradient checkpointing (shared-prompt layouts in both): log-probs and gradients
    must agree (max abs / max relative gap), with the time and memory of each."""
    model.train()
    model.gradient_checkpointing_disable()
    plain = one_step(model, items, pad_id, micro_batch)
    model.gradient_checkpointing_enable()
    ckpt = one_step(model, items, pad_id, micro_batch)
    model.gradient_checkpointing_disable()
    lp_gap = max(float((a.float() - b.float()).abs().max()) for a, b in zip(plain["lps"], ckpt["lps"]))
    g_gap = max(float((plain["grads"][n].float() - g.float()).abs().max() / (plain["grads"][n].float().abs().max() + 1e-12))
                for n, g in ckpt["grads"].items())
    res = {"logprob_gap": lp_gap, "grad_rel_gap": g_gap, "same_grads": plain["grads"].keys() == ckpt["grads"].keys()}
    for tag, r in (("plain", plain), ("ckpt", ckpt)):
        res.update({f"{tag}_seconds": r["seconds"], f"{tag}_saved_MB": r["saved_bytes"] / 2**20})
        if r["peak_bytes"] is not None:
            res[f"{tag}_peak_MB"] = r["peak_bytes"] / 2**20
    res["ok"] = res["same_grads"] and lp_gap < 1e-4 and g_gap < 1e-3
    return res


def reduced_qwen2_5_vl_7b(out_dir: str, text_layers: int = 2, vision_layers: int = 4) -> str:
    """A random-init checkpoint with Qwen2.5-VL-7B's widths, heads, KV heads, mrope sections ([16, 24, 24] from
    head_dim 128) and window / full-attention vision blocks at reduced depth, with the tiny BPE tokenizer."""
    from mmrl.models.tiny import TinySpec, make_tiny_model

    spec = TinySpec(text_hidden=3584, text_layers=text_layers, text_heads=28, text_kv_heads=4, text_intermediate=18944,
                    vision_hidden=1280, vision_layers=vision_layers, vision_heads=16, vision_intermediate=3420,
                    max_positions=32768, max_pixels=448 * 448)
    return str(make_tiny_model(out_dir, spec))


def _spy(calls: List[str], obj, name: str, tag: str) -> None:
    fn = getattr(obj, name)

    def wrapped(*args, **kwargs):
        calls.append(tag)
        return fn(*args, **kwargs)

    setattr(obj, name, wrapped)


def cache_reset_check(engine, model, request, pad_id: int, tol: float = 0.05, scale: float = 4.0) -> Dict[str, float]:
    """A vLLM engine after a vision-weight change: every sync must reset the prefix, multimodal and encoder caches
    (counted on vLLM's own objects), and the next rollout of the SAME video prompt must match the trainer's scorer
    under the new weights (a stale encoder or prefix cache would give the old weights' log-probs).

    The vision merger's weights are scaled by ``scale``, synced (``everything``: a frozen tower travels too),
    the prompt is sampled greedily before and after, then the weights are restored and synced back."""
    from mmrl.models.scoring import backbone
    from mmrl.rollout.base import SamplingParams
    from mmrl.rollout.parity import logprob_parity

    calls: List[str] = []
    llm = engine.backend.llm
    _spy(calls, llm, "reset_prefix_cache", "prefix")
    _spy(calls, llm, "reset_mm_cache", "mm")
    _spy(calls, llm.llm_engine, "reset_encoder_cache", "encoder")
    params = SamplingParams(greedy=True, max_new_tokens=8)
    before = logprob_parity(engine, model, [request], params, pad_id)
    merger = [p for p in backbone(model)[0].visual.merger.parameters()]
    saved = [p.detach().clone() for p in merger]
    try:
        with torch.no_grad():
            for p in merger:
                p.mul_(scale)
        engine.sync_weights(model, everything=True)
        after = logprob_parity(engine, model, [request], params, pad_id)
    finally:
        with torch.no_grad():
            for p, s in zip(merger, saved):
                p.copy_(s)
        engine.sync_weights(model, everything=True)
    resets = {tag: calls.count(tag) for tag in ("prefix", "mm", "encoder")}
    return {"resets_prefix": resets["prefix"], "resets_mm": resets["mm"], "resets_encoder": resets["encoder"],
            "parity_before": before.max_abs, "parity_after_vision_change": after.max_abs,
            "ok": all(v == 2 for v in resets.values()) and before.ok(tol) and after.ok(tol)}


def long_clip_request(processor, frames: int = 16, seconds: float = 60.0, height: int = 448, width: int = 224,
                      seed: int = 0):
    """One rollout request over a ``frames``-frame ``height``x``width`` clip spread over ``seconds`` (the configs'
    video: text after it sits 90 positions past transformers 5.x's numbering, issue 26 item 2)."""
    from mmrl.data.schema import Media
    from mmrl.media.inputs import build_prompt_inputs
    from mmrl.media.prompts import build_messages
    from mmrl.rollout.base import RolloutRequest

    g = torch.Generator().manual_seed(seed)
    m = Media("clip", frames=torch.randint(0, 255, (frames, 3, height, width), dtype=torch.uint8, generator=g),
              timestamps=[k * seconds / frames for k in range(frames)], fps=frames / seconds)
    pi = build_prompt_inputs(processor, build_messages("What happens in the video?", ["A", "B"], m), m)
    return RolloutRequest(inputs=pi, n=1, sample_id="clip", group_id=0, meta={"seed": seed})


def positions_check(engine, model, request, pad_id: int, tol: float = 0.05) -> Dict[str, object]:
    """Sampler (vLLM numbers positions with the original Qwen rule) vs the trainer's scorer on a long sparse clip:
    equal log-probs only if the scorer numbers positions the same way. Notes whether ``mmrl.models.mrope`` (the
    positions module) is installed."""
    from mmrl.rollout.base import SamplingParams
    from mmrl.rollout.parity import logprob_parity

    rep = logprob_parity(engine, model, [request], SamplingParams(greedy=True, max_new_tokens=8), pad_id)
    return {"prompt_tokens": request.inputs.num_tokens, "parity_max_abs": rep.max_abs,
            "mrope_module": importlib.util.find_spec("mmrl.models.mrope") is not None, "ok": rep.ok(tol)}
