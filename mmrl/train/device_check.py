"""The device check (issue 43): what one GRPO step costs on real shapes, on the lent GPU machine's own image (its
torch and transformers, no vLLM), as ONE table. ``scripts/device_check.sh`` runs it; ``--cpu`` is the rehearsal the
suite runs (``tests/train/test_device_check.py``): the same code on the tiny model and a 3B-wide model at depth 1.

    python -m mmrl.train.device_check [--cpu] [--models 3b,7b] [--budget-s 420] [--out runs/device_check]

Per model (random init from the real config, built on the device in bf16; the tiny BPE tokenizer, embedding rows
padded to the real vocabulary): ``rollout`` = the HF engine samples ``n`` responses of ``length`` tokens (EOS
suppressed, so every response runs to ``length``) for one ``frames``-frame video prompt, then the scorer re-scores
them (the bf16 sampler-vs-scorer log-prob gap, ``mmrl.rollout.parity``); ``update[attn,ckpt]`` = forward + backward
+ fused AdamW on the same 8 sequences with fp32 master weights and bf16 autocast (vision frozen), sdpa vs eager
attention, gradient checkpointing off / on; ``precision`` = share of entries one AdamW step at lr 1e-6 changes, fp32
masters vs pure bf16 (``gpu_checks.precision_check``); ``lora_sync`` = seconds to compute the merged LoRA weights a
sync sends (r 64 on all 7 projections, ``gpu_checks.lora_sync_check``). The 7B's full update runs only where
16 bytes a trainable parameter (fp32 weight, gradient, two AdamW moments) fit the card.

Model FLOPs (Kaplan et al. 2020, eq. 2.1; MFU as in PaLM, Chowdhery et al. 2022, app. B), attention's own FLOPs
(~4 * layers * width * context a token) left out:
    N_lm  = language-model parameters that multiply: decoder layers, final norm, LM head (the input embedding is a
            lookup: not counted, unless tied, where it IS the LM head); N_vis = vision tower + merger.
    P = prompt tokens, R_i = response i's tokens, patches = vision patches of the prompt (4 per video token).
    generation  2 * N_lm * (P + sum R_i) + 2 * N_vis * patches      (the prompt prefilled once)
    update      6 * N_lm * T + 2 * N_vis * patches, T = P + sum R_i (the shared-prompt layouts compute the prompt once)
    update_verl 6 * N_lm * sum (P + R_i) + 2 * N_vis * patches      (veRL's / EasyR1's count: every sequence whole)
    MFU = FLOPs / seconds / peak; peak = 989e12 bf16 dense for H100 SXM and H200 (NVIDIA datasheets), 756e12 for
    H100 PCIe; none on a CPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import sys
import time
from typing import Callable, Dict, List, Optional

import torch

from mmrl.models.tiny import TinySpec

# Qwen/Qwen2.5-VL-3B- and -7B-Instruct config.json sizes (as in tests/models/test_real_shapes.py, full depth here).
QWEN2_5_VL_3B = TinySpec(family="qwen2_5_vl", text_hidden=2048, text_layers=36, text_heads=16, text_kv_heads=2,
                         text_intermediate=11008, vocab_size=151936, tie_embeddings=True, vision_hidden=1280,
                         vision_layers=32, vision_heads=16, vision_intermediate=3420, mrope_section=[16, 24, 24],
                         fullatt_block_indexes=[7, 15, 23, 31], window_size=112, max_positions=128000,
                         rope_theta=1e6, max_pixels=448 * 448)
QWEN2_5_VL_7B = dataclasses.replace(QWEN2_5_VL_3B, text_hidden=3584, text_layers=28, text_heads=28, text_kv_heads=4,
                                    text_intermediate=18944, vocab_size=152064, tie_embeddings=False)


@dataclasses.dataclass
class Size:
    models: Dict[str, TinySpec]
    frames: int = 16
    height: int = 448
    width: int = 224
    n: int = 8
    length: int = 256
    precision_steps: int = 1
    precision_models: tuple = ("3b",)  # the 7B's fp32 copy plus a snapshot would not fit beside its model
    lora_syncs: int = 3
    warmup: bool = True  # one untimed update per attention implementation first (cuBLAS / kernel selection)


GPU = Size(models={"3b": QWEN2_5_VL_3B, "7b": QWEN2_5_VL_7B})
CPU = Size(models={"tiny": TinySpec(max_pixels=112 * 112),
                   "3b-depth1": dataclasses.replace(QWEN2_5_VL_3B, text_layers=1, vision_layers=1,
                                                    fullatt_block_indexes=[0], vocab_size=None)},
           frames=4, height=56, width=56, n=2, length=8, precision_models=("tiny",), lora_syncs=1, warmup=False)

PEAK_BF16 = (("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12))


def peak_flops(card: str) -> Optional[float]:
    """bf16 dense peak of ``card`` (its CUDA device name), None where unknown (CPU)."""
    return next((peak for key, peak in PEAK_BF16 if key in card), None)


def step_flops(n_lm: int, n_vis: int, prompt: int, responses: List[int], patches: int) -> Dict[str, float]:
    """Model FLOPs of one prompt with its responses (module docstring): generation, update, update by veRL's count."""
    vis = 2 * n_vis * patches
    return {"generation": 2 * n_lm * (prompt + sum(responses)) + vis,
            "update": 6 * n_lm * (prompt + sum(responses)) + vis,
            "update_verl": 6 * n_lm * sum(prompt + r for r in responses) + vis}


def param_split(model) -> tuple:
    """(N_lm, N_vis) of the module docstring."""
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    n_vis = sum(p.numel() for n, p in model.named_parameters() if ".visual." in f".{n}")
    n_rest = sum(p.numel() for n, p in model.named_parameters() if ".visual." not in f".{n}")
    return n_rest - (0 if emb is head else emb.numel()), n_vis


def environment(device: str) -> Dict[str, object]:
    import transformers

    card = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu"
    row = {"card": card, "torch": torch.__version__, "transformers": transformers.__version__,
           "python": platform.python_version(), "ok": True}
    try:
        import peft

        row["peft"] = peft.__version__
    except ImportError:
        row["peft"] = "absent"
    if device == "cuda":
        row["memory_GB"] = torch.cuda.get_device_properties(0).total_memory / 2**30
    row["peak_TFLOPs"] = (peak_flops(card) or 0) / 1e12
    return row


def import_sweep() -> Dict[str, object]:
    """Import every mmrl module: which ones this image cannot import, and the first missing name of each."""
    import importlib
    import pkgutil

    import mmrl

    missing, broken = set(), []
    names = [m.name for m in pkgutil.walk_packages(mmrl.__path__, "mmrl.") if not m.name.endswith("__main__")]
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:  # a package this image lacks (av, faiss, vllm...)
            missing.add(name if not e.name else e.name.split(".")[0])
        except Exception as e:  # anything else is a break under this torch / transformers
            broken.append(f"{name} ({type(e).__name__}: {e})"[:120])
    return {"modules": len(names), "packages_missing": ", ".join(sorted(missing)) or "-",
            "broken": "; ".join(broken) or "-", "ok": not broken}


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gb(device: str) -> Optional[float]:
    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None


def _mfu(flops: float, seconds: float, peak: Optional[float]) -> Optional[float]:
    return flops / seconds / peak if peak and seconds > 0 else None


def rollout_row(model, proc, request, size: Size, n_lm: int, n_vis: int, peak, device: str) -> Dict[str, object]:
    """HF-engine generation and the scorer's re-scoring of the same tokens, bf16: speed, MFU, log-prob gap."""
    from mmrl.rollout.base import SamplingParams, build_engine
    from mmrl.rollout.parity import logprob_parity

    engine = build_engine("hf", model=model, processor=proc)
    engine.suppress = list(engine.suppress) + [engine.eos_id]  # every response runs to ``length`` tokens
    params = SamplingParams(max_new_tokens=size.length)
    if device == "cuda":
        logprob_parity(engine, model, [dataclasses.replace(request, n=1)], SamplingParams(max_new_tokens=8),
                       proc.tokenizer.pad_token_id)  # warm-up: kernels, the fused decoder's self-check
        torch.cuda.reset_peak_memory_stats()
    rep = logprob_parity(engine, model, [request], params, proc.tokenizer.pad_token_id)
    patches = int(request.inputs.vision["pixel_values_videos"].shape[0])
    flops = step_flops(n_lm, n_vis, request.inputs.num_tokens, [rep.tokens // max(rep.sequences, 1)] * rep.sequences,
                       patches)
    return {"prompt_tokens": request.inputs.num_tokens, "responses": rep.sequences, "tokens": rep.tokens,
            "gen_tokens_per_s": rep.tokens_per_s, "gen_seconds": rep.generate_seconds,
            "gen_MFU": _mfu(flops["generation"], rep.generate_seconds, peak), "score_seconds": rep.score_seconds,
            "logprob_gap_max": rep.max_abs, "logprob_gap_mean": rep.mean_abs, "peak_GB": _peak_gb(device),
            "ok": rep.tokens == size.n * size.length}


def update_row(model, opt, items, pad: int, attn: str, ckpt: bool, flops: Dict[str, float], peak, device: str,
               warmup: bool) -> Dict[str, object]:
    """Forward + backward of the responses' log-probs (bf16 autocast, fp32 masters) and one fused AdamW step."""
    from mmrl.models.scoring import response_logprobs

    model.set_attn_implementation(attn)
    (model.gradient_checkpointing_enable if ckpt else model.gradient_checkpointing_disable)()
    model.train()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step():
        model.zero_grad(set_to_none=True)  # gradients an out-of-memory step left behind
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            lps = response_logprobs(model, items, micro_batch=len(items), pad_id=pad)
        (-torch.cat(lps).float().mean()).backward()
        sync()
        t_bwd = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        return t_bwd

    if warmup:
        step()
    _free()
    t0 = time.perf_counter()
    t_bwd = step()
    total = time.perf_counter() - t0
    return {"fwd_bwd_seconds": t_bwd - t0, "adamw_seconds": total - (t_bwd - t0), "peak_GB": _peak_gb(device),
            "MFU": _mfu(flops["update"], total, peak), "MFU_verl_count": _mfu(flops["update_verl"], total, peak),
            "ok": True}


def check_model(name: str, spec: TinySpec, size: Size, device: str, peak, deadline: float,
                emit: Callable[[str, Dict[str, object]], None]) -> None:
    from mmrl.config import LoraConfig
    from mmrl.models.loading import prepare_model
    from mmrl.models.tiny import build_model, build_tokenizer
    from mmrl.models.chat_template import chat_template_for
    from mmrl.train import gpu_checks as gc_

    tok = build_tokenizer(spec.bpe_vocab, chat_template_for(spec.family))
    build = lambda: build_model(spec, tok, device=device, dtype=torch.bfloat16)  # noqa: E731

    def section(tag, fn):
        if time.time() > deadline:
            return emit(f"{name}/{tag}", {"skipped": "time budget", "ok": False})
        t0 = time.perf_counter()
        try:
            row = fn()
        except Exception as e:  # one failed section (an OOM, say) must not hide the others' numbers
            row = {"error": f"{type(e).__name__}: {e}"[:160], "ok": False}
        row["seconds"] = time.perf_counter() - t0
        emit(f"{name}/{tag}", row)
        _free()

    t0 = time.perf_counter()
    model, proc = build()
    model = prepare_model(model, freeze_vision=True)
    n_lm, n_vis = param_split(model)
    emit(f"{name}/build", {"N_lm_B": n_lm / 1e9, "N_vis_B": n_vis / 1e9, "layers": spec.text_layers,
                           "seconds": time.perf_counter() - t0, "ok": True})
    pad = proc.tokenizer.pad_token_id
    request = dataclasses.replace(gc_.long_clip_request(proc, size.frames, height=size.height, width=size.width),
                                  n=size.n)
    section("rollout", lambda: rollout_row(model, proc, request, size, n_lm, n_vis, peak, device))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    free_gb = torch.cuda.mem_get_info()[0] / 2**30 if device == "cuda" else float("inf")
    need_gb = 14 * trainable / 2**30 + 8  # fp32 weight + grad + 2 moments, less the bf16 copy there; + activations
    if need_gb > free_gb:
        emit(f"{name}/update", {"skipped": f"needs ~{need_gb:.0f} GB, {free_gb:.0f} GB free", "ok": True})
    else:
        from mmrl.train.precision import keep_fp32_master

        keep_fp32_master(model)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6,
                                fused=device == "cuda")
        g = torch.Generator().manual_seed(0)
        items = [(request.inputs, torch.randint(0, 500, (size.length,), generator=g)) for _ in range(size.n)]
        flops = step_flops(n_lm, n_vis, request.inputs.num_tokens, [size.length] * size.n,
                           int(request.inputs.vision["pixel_values_videos"].shape[0]))
        for attn in ("sdpa", "eager"):
            for ckpt in (False, True):
                section(f"update[{attn},{'ckpt' if ckpt else 'no-ckpt'}]",
                        lambda: update_row(model, opt, items, pad, attn, ckpt, flops, peak, device,
                                           size.warmup and not ckpt))
        del opt
    del model
    _free()
    if name in size.precision_models:  # one bf16 model, then one with fp32 masters (the update's memory)
        section("precision", lambda: gc_.precision_check(lambda: prepare_model(build()[0], freeze_vision=True),
                                                         device=device, steps=size.precision_steps))

    def lora():
        lcfg = LoraConfig(enabled=True, r=64, alpha=128, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                           "gate_proj", "up_proj", "down_proj"])
        lmodel = prepare_model(build()[0], lora=lcfg).eval()
        from mmrl.models.scoring import response_logprobs

        probe_items = [(request.inputs, torch.randint(0, 500, (8,), generator=torch.Generator().manual_seed(1)))]

        def probe():
            with torch.no_grad():
                return torch.cat(response_logprobs(lmodel, probe_items, pad_id=pad))

        return gc_.lora_sync_check(lmodel, syncs=size.lora_syncs, probe=probe)

    section("lora_sync", lora)


def run(size: Size, models: List[str], budget_s: float, device: str, out_dir: Optional[str] = None) -> Dict[str, Dict]:
    """Every row in order, each printed as it is done (``[device_check] name: {...}``) and kept in the result."""
    deadline = time.time() + budget_s
    rows: Dict[str, Dict[str, object]] = {}

    def emit(name, row):
        row = {k: v for k, v in row.items() if v is not None}
        rows[name] = row
        print(f"[device_check] {name}: {json.dumps(row, default=str)}", flush=True)
        if out_dir:
            with open(os.path.join(out_dir, "device_check.jsonl"), "a") as f:
                f.write(json.dumps({name: row}, default=str) + "\n")

    if out_dir:
        open(os.path.join(out_dir, "device_check.jsonl"), "w").close()
    env = environment(device)
    emit("env", env)
    t0 = time.perf_counter()
    emit("imports", {**import_sweep(), "seconds": time.perf_counter() - t0})
    for name in models:
        if time.time() > deadline:
            emit(f"{name}/build", {"skipped": "time budget", "ok": False})
            continue
        try:
            check_model(name, size.models[name], size, device, peak_flops(env["card"]) if device == "cuda" else None,
                        deadline, emit)
        except Exception as e:  # a model that does not build or fit: its row says so, the next model still runs
            emit(f"{name}/build", {"error": f"{type(e).__name__}: {e}"[:160], "ok": False})
        _free()
    return rows


def main(argv: List[str] | None = None) -> int:
    from mmrl.train.gpu_smoke import table

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu", action="store_true", help="the rehearsal size: tiny and 3B-wide depth-1 models, on CPU")
    p.add_argument("--models", default=None, help="comma-separated subset of the size's models")
    p.add_argument("--budget-s", type=float, default=420.0, help="sections past this many seconds are skipped")
    p.add_argument("--out", default=None, help="folder for device_check.jsonl and table.md")
    a = p.parse_args(argv)
    size = CPU if a.cpu else GPU
    models = a.models.split(",") if a.models else list(size.models)
    unknown = [m for m in models if m not in size.models]
    if unknown:
        p.error(f"--models: {', '.join(unknown)} not among {', '.join(size.models)}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() and not a.cpu else "cpu"
    rows = run(size, models, a.budget_s, device, a.out)
    text = table(rows)
    print(text)
    if a.out:
        with open(os.path.join(a.out, "table.md"), "w") as f:
            f.write(text + "\n")
    return 0 if all(r.get("ok") for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
