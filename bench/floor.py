"""The floor: the bare minimum computation of one GRPO step of ``bench/vs_trl.py``, in plain torch.

    OMP_NUM_THREADS=1 .venv/bin/python bench/floor.py --world runs/vs_trl/world_image [--max-new-tokens 256]
                                                      [--prompts 16] [--n 8] [--steps 4] [--warmup 1]

The same tiny Qwen2.5-VL weights and the same prompts as the benchmark's arms (mmrl's processor output for
``--prompts`` samples of the world per step, built before the clock starts: decoding and the processor are not
part of the floor), and per step only:

1. **Generation**: the vision tower once per prompt (the model's own ``visual`` module), one prefill per prompt
   (all prompts in one right-padded batch), then ``max_new_tokens`` KV-cached sampling steps for ``prompts x n``
   rows, each row reading its prompt's keys/values and its own (a preallocated cache written in place), and
   ``torch.multinomial``'s draw on the softmax of the logits (temperature 1, no top-k/top-p: the benchmark's
   setting) by the fastest exact way known here, ``mmrl.rollout.sampling.multinomial_rows`` (the same draw without
   ``torch.multinomial``'s serial per-element exponential; ``bench/decode_speed.py``).
2. **Update**: one forward and backward over exactly the prompt tokens (once per prompt) and the response tokens
   (once per response, attending to its prompt's keys/values), in micro-batches of ``micro_batch`` responses (64,
   the benchmark's; the same arithmetic as one pass, with a smaller working set): no padding, no prompt repeated;
   the log-probs of the sampled tokens, GRPO advantages (group mean/std of a random stand-in reward), the PPO-clip
   loss with per-sequence token mean, grad-norm clip 1.0 and one AdamW step.

The transformer is written out with ``torch.nn.functional`` (RMSNorm, linear, rotary embedding, SDPA with GQA,
SwiGLU) over the model's parameters; positions are 1-D (M-RoPE's three axes cost the same elementwise work).
What it leaves out, by design: the processor, rewards, logging, Python bookkeeping, EOS handling (the random model
does not stop early in the benchmark either). ``run_floor(spec)`` is the arm ``bench/vs_trl.py`` runs.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Dict, List

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent


class Floor:
    """Plain-torch forward of the tiny model's language stack, on the model's own parameters."""

    def __init__(self, model):
        self.model = model
        lm = model.model.language_model
        self.lm, self.layers, self.head = lm, lm.layers, model.lm_head
        cfg = model.config.get_text_config()
        self.eps, self.H, self.KV = cfg.rms_norm_eps, cfg.num_attention_heads, cfg.num_key_value_heads
        self.D = cfg.hidden_size // self.H
        self.inv_freq = lm.rotary_emb.inv_freq

    def rope(self, pos: torch.Tensor):
        f = pos[..., None].float() * self.inv_freq  # [B, S, D/2]
        e = torch.cat([f, f], dim=-1)
        return e.cos()[:, None], e.sin()[:, None]

    @staticmethod
    def rotate(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def layer(self, i: int, h: torch.Tensor, cos, sin, past=None, mask=None, causal=False, write=None):
        """One decoder layer on ``h [B, S, hidden]``; ``past`` = (keys, values) ``[B, KV, L, D]`` to attend to first,
        or ``write`` = (key buffer, value buffer, L): this call's keys/values are written in place at column ``L``
        and attention reads the filled columns. Returns the new hidden states and this call's (keys, values)."""
        L = self.layers[i]
        B, S, _ = h.shape
        x = F.rms_norm(h, (h.shape[-1],), L.input_layernorm.weight, self.eps)
        a = L.self_attn
        q = F.linear(x, a.q_proj.weight, a.q_proj.bias).view(B, S, self.H, self.D).transpose(1, 2)
        k = F.linear(x, a.k_proj.weight, a.k_proj.bias).view(B, S, self.KV, self.D).transpose(1, 2)
        v = F.linear(x, a.v_proj.weight, a.v_proj.bias).view(B, S, self.KV, self.D).transpose(1, 2)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        if write is not None:
            bk, bv, n = write
            bk[:, :, n : n + S], bv[:, :, n : n + S] = k, v
            kk, vv = bk[:, :, : n + S], bv[:, :, : n + S]
        else:
            kk, vv = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
        o = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, is_causal=causal and mask is None, enable_gqa=True)
        h = h + F.linear(o.transpose(1, 2).reshape(B, S, -1), a.o_proj.weight)
        x = F.rms_norm(h, (h.shape[-1],), L.post_attention_layernorm.weight, self.eps)
        m = L.mlp
        h = h + F.linear(F.silu(F.linear(x, m.gate_proj.weight)) * F.linear(x, m.up_proj.weight), m.down_proj.weight)
        return h, (k, v)

    def embed(self, prompts) -> tuple:
        """Right-padded prompt embeddings with the vision tower's features in place, the key mask, lengths."""
        ids = torch.nn.utils.rnn.pad_sequence([p.input_ids for p in prompts], batch_first=True)
        lengths = torch.tensor([p.num_tokens for p in prompts])
        emb = self.lm.embed_tokens(ids)
        core = self.model.model
        for key, grid, tok in (("pixel_values", "image_grid_thw", "image_token_id"),
                               ("pixel_values_videos", "video_grid_thw", "video_token_id")):
            have = [p for p in prompts if key in p.vision]
            if have:
                feats = core.visual(torch.cat([p.vision[key] for p in have]),
                                    grid_thw=torch.cat([p.vision[grid] for p in have]))
                feats = feats.pooler_output if hasattr(feats, "pooler_output") else feats
                sel = ids == getattr(self.model.config, tok)
                emb = emb.masked_scatter(sel[..., None], feats.to(emb.dtype))
        mask = torch.arange(ids.shape[1])[None] < lengths[:, None]
        return emb, mask, lengths

    def prefill(self, prompts):
        """All prompts once: per-layer (keys, values) ``[U, KV, P, D]``, last hidden state per prompt, key mask."""
        h, mask, lengths = self.embed(prompts)
        U, P = mask.shape
        cos, sin = self.rope(torch.arange(P).expand(U, P))
        causal = torch.ones(P, P, dtype=torch.bool).tril()[None, None] & mask[:, None, None, :]
        kvs = []
        for i in range(len(self.layers)):
            h, kv = self.layer(i, h, cos, sin, mask=causal)
            kvs.append(kv)
        h = F.rms_norm(h, (h.shape[-1],), self.lm.norm.weight, self.eps)
        return kvs, h[torch.arange(U), lengths - 1], mask, lengths

    @torch.no_grad()
    def generate(self, prompts, n: int, T: int) -> torch.Tensor:
        """``T`` tokens for each of ``n`` samples per prompt, drawn from the global generator (seeded by
        ``run_floor``)."""
        from mmrl.rollout.sampling import multinomial_rows

        kvs, last, pmask, lengths = self.prefill(prompts)
        owner = torch.arange(len(prompts)).repeat_interleave(n)
        N, P = len(owner), pmask.shape[1]
        cache = []
        for k, v in kvs:
            bk, bv = k.new_empty(N, self.KV, P + T, self.D), v.new_empty(N, self.KV, P + T, self.D)
            bk[:, :, :P], bv[:, :, :P] = k[owner], v[owner]
            cache.append((bk, bv))
        keymask = torch.ones(N, 1, 1, P + T, dtype=torch.bool)
        keymask[:, 0, 0, :P] = pmask[owner]
        logits, pos = self.head(last[owner]), lengths[owner]
        toks = []
        for t in range(T):
            nxt = multinomial_rows(logits.float().softmax(-1)).unsqueeze(1)
            toks.append(nxt)
            if t == T - 1:
                break
            h = self.lm.embed_tokens(nxt)
            cos, sin = self.rope((pos + t)[:, None])
            for i in range(len(self.layers)):
                h, _ = self.layer(i, h, cos, sin, mask=keymask[..., : P + t + 1], write=cache[i] + (P + t,))
            logits = self.head(F.rms_norm(h[:, 0], (h.shape[-1],), self.lm.norm.weight, self.eps))
        return torch.cat(toks, dim=1)

    def loss(self, prompts, n: int, resp: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
        kvs, last, pmask, lengths = self.prefill(prompts)
        owner = torch.arange(len(prompts)).repeat_interleave(n)
        N, R = resp.shape
        W, P = R - 1, pmask.shape[1]
        h = self.lm.embed_tokens(resp[:, :W])
        cos, sin = self.rope(lengths[owner, None] + torch.arange(W)[None])
        mask = torch.cat([pmask[owner][:, None, None, :].expand(N, 1, W, P),
                          torch.ones(W, W, dtype=torch.bool).tril().expand(N, 1, W, W)], dim=-1)
        for i, (k, v) in enumerate(kvs):
            h, _ = self.layer(i, h, cos, sin, past=(k[owner], v[owner]), mask=mask)
        h = F.rms_norm(h, (h.shape[-1],), self.lm.norm.weight, self.eps)
        hidden = torch.cat([last[owner][:, None], h], dim=1)  # position t predicts token t
        lp = torch.log_softmax(self.head(hidden).float(), -1).gather(-1, resp[..., None]).squeeze(-1)
        ratio = torch.exp(lp - lp.detach())  # one update per rollout: old = current log-probs
        obj = torch.minimum(ratio * adv[:, None], ratio.clamp(0.8, 1.2) * adv[:, None])
        return -obj.mean(dim=1).mean()


def step_prompts(spec: Dict, proc) -> List[list]:
    """The prompts of each step: mmrl's processor output for consecutive samples of the world (built up front)."""
    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.rollout.step_inputs import build_step_inputs

    cfg = load_config([str(REPO / "configs/demo.yaml")], [f"model.path={spec['model']}", "data.max_pixels=3136"])
    samples, _ = load_samples(str(Path(spec["world"]) / "train.json"), nframes=cfg.data.nframes,
                              max_pixels=cfg.data.max_pixels)
    k = spec["prompts_per_step"]
    out = []
    for s in range(spec["steps"]):
        chunk = [samples[(s * k + j) % len(samples)] for j in range(k)]
        out.append([r.inputs for r in build_step_inputs(chunk, proc, cfg.data, lambda role, views: 1).requests])
    return out


def run_floor(spec: Dict) -> Dict:
    """Time ``spec["steps"]`` floor steps; the per-step record ``bench/vs_trl.py`` summarises."""
    from mmrl.models.loading import load_model, load_processor

    torch.manual_seed(spec["seed"])
    proc, model = load_processor(spec["model"]), load_model(spec["model"])
    model.train()
    floor, opt = Floor(model), torch.optim.AdamW(model.parameters(), lr=spec["lr"], weight_decay=0.0)
    gen = torch.Generator().manual_seed(spec["seed"])
    n, T = spec["n"], spec["max_new_tokens"]
    per_step, rss = [], 0
    for prompts in step_prompts(spec, proc):
        t0, c0 = time.perf_counter(), time.process_time()
        resp = floor.generate(prompts, n, T)
        t1 = time.perf_counter()
        reward = torch.rand(len(prompts), n, generator=gen)
        adv = ((reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-4)).view(-1)
        opt.zero_grad(set_to_none=True)
        k = max(1, spec.get("micro_batch", 64) // n)  # prompts per micro-batch (the benchmark's micro-batch of 64)
        for s in range(0, len(prompts), k):  # mean over all sequences = sum of micro-batch means x their share
            rows = slice(s * n, (s + k) * n)
            share = resp[rows].shape[0] / resp.shape[0]
            (floor.loss(prompts[s : s + k], n, resp[rows], adv[rows]) * share).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec["grad_clip"])
        opt.step()
        now = time.perf_counter()
        per_step.append({"step": now - t0, "cpu": time.process_time() - c0, "gen": t1 - t0, "score": 0.0,
                         "tokens": int(resp.numel()), "samples": int(resp.shape[0])})
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"per_step": per_step, "peak_rss_kb": rss, "threads": torch.get_num_threads()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", required=True, help="a make_image_world / make_video_world folder (train.json)")
    ap.add_argument("--model", default=None, help="checkpoint folder (default: the embedded tiny model)")
    ap.add_argument("--max-new-tokens", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from mmrl.models.tiny import ensure_tiny_model

    spec = {"model": a.model or str(ensure_tiny_model()), "world": a.world, "prompts_per_step": a.prompts, "n": a.n,
            "max_new_tokens": a.max_new_tokens, "steps": a.steps, "lr": a.lr, "grad_clip": 1.0, "seed": a.seed}
    res = run_floor(spec)
    steps = res["per_step"][a.warmup:] or res["per_step"][-1:]
    print(json.dumps({"s_per_step": sum(s["step"] for s in steps) / len(steps),
                      "gen_s": sum(s["gen"] for s in steps) / len(steps), "peak_rss_mb": res["peak_rss_kb"] / 1024}))


if __name__ == "__main__":
    main()
