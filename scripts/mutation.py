"""Mutation testing of the modules that decide rewards, updates, frames, checkpoints, views, annotations and the newer methods.

Runs mutmut (``pip install -e ".[dev]"``) once per module group, each in its own scratch copy of the project
(``runs/mutation/<group>/``) so that every group mutates only its files and runs only its fast tests
(``-m "not slow"``), with one worker (this machine has 2 shared cores) and a wall-clock budget per group.
A mutant is *caught* when a test fails (or times out) on it; the score is caught / (caught + survived), with
the mutants listed in ``EQUIVALENT`` (argued in docs/testing.md, matched by their changed line) left out.

    python scripts/mutation.py                       # every group
    python scripts/mutation.py rewards update        # some groups
    python scripts/mutation.py --budget-min 10 views # another time budget per group (minutes; default BUDGET_MIN)
    python scripts/mutation.py --rescore pacg        # score the last run again with this EQUIVALENT list

Prints one line per group and the surviving mutants (``mutmut show NAME`` in the group's folder prints a diff),
and writes ``runs/mutation/summary.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# group -> (files mutated, test files run on each mutant)
GROUPS = {
    "rewards": (["mmrl/rewards/base.py", "mmrl/rewards/builtin.py", "mmrl/rewards/parsing.py",
                 "mmrl/rewards/bpo_contract.py"], ["tests/rewards", "tests/data/test_open_answers.py"]),
    "update": (["mmrl/train/update.py", "mmrl/train/backend.py"], ["tests/train/test_update.py"]),
    "decode": (["mmrl/media/decode.py"], ["tests/media/test_decode.py"]),
    "checkpoint": (["mmrl/train/checkpoint.py", "mmrl/train/optim.py"], ["tests/train/test_checkpoint.py"]),
    "views": (["mmrl/views/transforms.py", "mmrl/views/video_transforms.py", "mmrl/views/image_transforms.py",
               "mmrl/views/viewset.py"], ["tests/views/test_transforms.py", "tests/views/test_viewset.py",
                                          "tests/views/test_view_cases.py",
                                          "tests/views/test_region_transforms.py",
                                          "tests/views/test_declared_effects.py",
                                          "tests/views/test_viewset_spec.py",
                                          "tests/views/test_viewset_expand_spec.py",
                                          "tests/views/test_if_unchanged.py",
                                          "tests/views/test_transform_math.py"]),
    "annotations": (["mmrl/data/annotations.py"], ["tests/data/test_annotations.py",
                                                   "tests/data/test_annotation_validation.py"]),
    "ovobench_score": (["mmrl/eval/benchmarks/ovobench/score.py"], ["tests/eval/test_eval_ovobench.py", "tests/eval/test_eval_ovo_small.py",
                                                                 "tests/eval/test_eval_ovo_exact.py"]),
    # the methods beyond the GRPO family (issue 30), one group per method family so each fits its budget
    "pacg": (["mmrl/algos/pacg.py", "mmrl/algos/pacg_gate.py"], ["tests/algos/test_pacg_core.py",
                                                                 "tests/algos/test_pacg_spec.py",
                                                                 "tests/algos/test_pacg_bounds.py",
                                                                 "tests/algos/test_pacg_content.py"]),
    "gdpo": (["mmrl/algos/gdpo.py", "mmrl/algos/stream_gdpo.py"], ["tests/algos/test_gdpo.py",
                                                                   "tests/algos/test_stream_gdpo.py"]),
    "dspo": (["mmrl/algos/dspo.py", "mmrl/algos/dspo_math.py", "mmrl/rewards/dspo_rewards.py",
              "mmrl/rewards/dspo_format.py"], ["tests/algos/test_dspo_math.py", "tests/algos/test_dspo_spec.py",
                                               "tests/rewards/test_dspo_format.py", "tests/algos/test_dspo_tables.py"]),
    "fastrl": (["mmrl/algos/fastrl.py"], ["tests/algos/test_fastrl.py", "tests/algos/test_fastrl_spec.py",
                                       "tests/algos/test_fastrl_contracts.py"]),
    "algos_other": (["mmrl/algos/tgrpo.py", "mmrl/algos/bpo.py", "mmrl/algos/vppo.py", "mmrl/algos/vppo_core.py",
                     "mmrl/algos/spec.py"], ["tests/algos/test_tgrpo.py", "tests/algos/test_bpo.py",
                                             "tests/algos/test_bpo_view_weights.py", "tests/algos/test_vppo_core.py",
                                             "tests/algos/test_pacg_spec.py", "tests/algos/test_spec.py",
                                             "tests/rewards/test_tgrpo_length.py", "tests/algos/test_bpo_tgrpo_contracts.py",
                                             "tests/algos/test_vppo_contracts.py", "tests/algos/test_spec_plumbing.py"]),
    "stream_rewards": (["mmrl/rewards/stream.py", "mmrl/rewards/stream_memory.py"],
                       ["tests/rewards/test_stream_rewards.py", "tests/rewards/test_stream_memory.py"]),
    "tool_rewards": (["mmrl/rewards/tool_use.py"], ["tests/tools/test_tool_rewards.py", "tests/tools/test_tool_clips.py"]),
    "tools": (["mmrl/tools/builtin.py", "mmrl/tools/calls.py"], ["tests/tools/test_tools.py",
                                                                "tests/tools/test_tool_clips.py"]),
    "stream_env": (["mmrl/stream/env.py", "mmrl/stream/actions.py"], ["tests/stream/test_env.py",
                                                                     "tests/stream/test_actions.py",
                                                                     "tests/stream/test_env_record.py"]),
    # multiturn and scorer run their fast tests per mutant: a model-free processor and scripted engine
    # (tests/rollout/fake_turns.py), a micro model built in memory (tests/models/micro_model.py); the tiny-model tests
    # of the same code (test_agent_loop.py, test_tool_episodes.py, test_scoring_*.py) stay in the suite, not here
    "multiturn": (["mmrl/rollout/agent_loop_multi.py"], ["tests/rollout/test_multi_turn_spec.py",
                                                         "tests/rollout/test_episode_tail.py"]),
    "scorer": (["mmrl/models/scoring.py", "mmrl/models/prefill.py", "mmrl/models/sequence_scoring.py"],
               ["tests/models/test_scorer_pieces.py", "tests/models/test_scorer_micro.py"]),
    "feature_mask": (["mmrl/models/feature_mask.py"], ["tests/models/test_feature_mask_tokens.py"]),
    "router": (["mmrl/retrieval/router_policy.py", "mmrl/retrieval/router_chain.py"],
               ["tests/retrieval/test_router_policy.py", "tests/retrieval/test_router_math.py"]),
    # the step's plumbing (resampling rounds, re-scoring, the passes' rows) on a model-free context (issue 44); the
    # tiny-model step tests (test_step_hooks.py, test_fastrl_step.py) are slow and stay in the suite
    "step": (["mmrl/train/step.py"], ["tests/train/test_step_resample.py"]),
}

# wall-clock budget per group (minutes) when --budget-min is not given: about what the group needs on a 2-core
# machine shared with other jobs (views took 37 min, multiturn 11, scorer 14 at load 8-12: docs/testing.md)
BUDGET_MIN = {"annotations": 20, "views": 40, "update": 20, "decode": 20, "pacg": 8, "gdpo": 10, "dspo": 12,
              "fastrl": 15, "algos_other": 20, "stream_rewards": 10, "tool_rewards": 5, "tools": 12, "stream_env": 12,
              "multiturn": 20, "scorer": 30, "feature_mask": 3, "router": 10, "step": 10}
DEFAULT_BUDGET_MIN = 15.0

DATA_DIRS = ("views", "configs", "eval", "tools")

# Mutants argued equivalent in docs/testing.md, as (file, original line, mutated line) with the lines stripped, so
# that the list survives renumbering. They are left out of the score (and still listed).
EQUIVALENT = {
    # checkpoint: keep=0 already slices [:-0] == [], so "keep >= 0" prunes nothing either
    ("mmrl/train/checkpoint.py", "for old in sorted(root.glob(\"step_*\"))[:-keep] if keep > 0 else []:",
     "for old in sorted(root.glob(\"step_*\"))[:-keep] if keep >= 0 else []:"),
    # optim: warm-up 0 and warm-up 1 both give factor min(1, (s+1)/1) = 1 from step 0
    ("mmrl/train/optim.py", "warm = max(0, int(train_cfg.warmup_steps))", "warm = max(1, int(train_cfg.warmup_steps))"),
    # decode: frames are always 4-D [T, C, H, W], so shape[2] is shape[-2] and shape[2:] is shape[-2:]
    ("mmrl/media/decode.py", "h, w = frames.shape[-2:]", "h, w = frames.shape[+2:]"),
    ("mmrl/media/decode.py", "source_size = (int(frames.shape[-1]), int(frames.shape[-2]))",
     "source_size = (int(frames.shape[-1]), int(frames.shape[+2]))"),
    # decode: smart_nframes returns >= 2 distinct indices (FRAME_FACTOR 2, n <= available), so len(idx) > 1 always
    # and the last and first timestamps differ by >= 1/fps, far above both floors
    ("mmrl/media/decode.py", "sampled_fps = (len(idx) - 1) / max(timestamps[-1] - timestamps[0], 1e-6) if len(idx) > 1 else fps",
     "sampled_fps = (len(idx) - 1) / max(timestamps[-1] - timestamps[0], 1e-6) if (len(idx) > 1) or True else fps"),
    ("mmrl/media/decode.py", "sampled_fps = (len(idx) - 1) / max(timestamps[-1] - timestamps[0], 1e-6) if len(idx) > 1 else fps",
     "sampled_fps = (len(idx) - 1) / max(timestamps[-1] - timestamps[0], 1e-6) if len(idx) >= 1 else fps"),
    ("mmrl/media/decode.py", "sampled_fps = (len(idx) - 1) / max(timestamps[-1] - timestamps[0], 1e-6) if len(idx) > 1 else fps",
     "sampled_fps = (len(idx) - 1) / max(timestamps[-1] - timestamps[0], 1.000001) if len(idx) > 1 else fps"),
    # update: the registered losses cast the advantages to logp's dtype themselves (losses._broadcast_adv)
    ("mmrl/train/update.py", "adv = adv.to(device=device, dtype=logp.dtype)", "adv = adv.to(device=device, dtype=None)"),
    ("mmrl/train/update.py", "adv = adv.to(device=device, dtype=logp.dtype)", "adv = adv.to(device=device, )"),
    # update: inside "adv.shape[1] != width", ">" and ">=" agree
    ("mmrl/train/update.py",
     "adv = adv[:, :width] if adv.shape[1] > width else torch.nn.functional.pad(adv, (0, width - adv.shape[1]))",
     "adv = adv[:, :width] if adv.shape[1] >= width else torch.nn.functional.pad(adv, (0, width - adv.shape[1]))"),
    # update: F.pad with a negative width crops, so padding by (width - T') when T' > width is the same cut
    ("mmrl/train/update.py",
     "adv = adv[:, :width] if adv.shape[1] > width else torch.nn.functional.pad(adv, (0, width - adv.shape[1]))",
     "adv = adv[:, :width] if (adv.shape[1] > width) and False else torch.nn.functional.pad(adv, (0, width - adv.shape[1]))"),
    # backend: the one-process all_reduce returns its values whatever the op
    ("mmrl/train/backend.py", "def all_reduce(self, values: Sequence[float], op: str = \"sum\") -> List[float]:",
     "def all_reduce(self, values: Sequence[float], op: str = \"XXsumXX\") -> List[float]:"),
    ("mmrl/train/backend.py", "def all_reduce(self, values: Sequence[float], op: str = \"sum\") -> List[float]:",
     "def all_reduce(self, values: Sequence[float], op: str = \"SUM\") -> List[float]:"),
    # decode: torchvision's resize defaults to antialias=True
    ("mmrl/media/decode.py",
     "return resize(frames, [rh, rw], interpolation=InterpolationMode.BICUBIC, antialias=True).contiguous()",
     "return resize(frames, [rh, rw], interpolation=InterpolationMode.BICUBIC, ).contiguous()"),
    # views: "< min + 1e-9" still holds the minimum; a float "ones" selection is cast by .float() anyway; an integer
    # arange compares exactly with float64 edges
    ("mmrl/views/image_transforms.py", "sel = d <= d.min(dim=1, keepdim=True).values + 1e-9  # [T, B]",
     "sel = d < d.min(dim=1, keepdim=True).values + 1e-9  # [T, B]"),
    ("mmrl/views/image_transforms.py", "sel = torch.ones(t, len(boxes), dtype=torch.bool)", "sel = torch.ones(t, len(boxes), dtype=None)"),
    ("mmrl/views/image_transforms.py", "sel = torch.ones(t, len(boxes), dtype=torch.bool)", "sel = torch.ones(t, len(boxes), )"),
    ("mmrl/views/image_transforms.py",
     "cols, rows = torch.arange(w, dtype=torch.float64), torch.arange(h, dtype=torch.float64)",
     "cols, rows = torch.arange(w, dtype=None), torch.arange(h, dtype=torch.float64)"),
    ("mmrl/views/image_transforms.py",
     "cols, rows = torch.arange(w, dtype=torch.float64), torch.arange(h, dtype=torch.float64)",
     "cols, rows = torch.arange(w, ), torch.arange(h, dtype=torch.float64)"),
    ("mmrl/views/image_transforms.py",
     "cols, rows = torch.arange(w, dtype=torch.float64), torch.arange(h, dtype=torch.float64)",
     "cols, rows = torch.arange(w, dtype=torch.float64), torch.arange(h, dtype=None)"),
    ("mmrl/views/image_transforms.py",
     "cols, rows = torch.arange(w, dtype=torch.float64), torch.arange(h, dtype=torch.float64)",
     "cols, rows = torch.arange(w, dtype=torch.float64), torch.arange(h, )"),
    # backend: zeroed gradients and absent ones give the same step (only memory differs); float("INF") is inf
    ("mmrl/train/backend.py", "self.optimizer.zero_grad(set_to_none=True)", "self.optimizer.zero_grad(set_to_none=None)"),
    ("mmrl/train/backend.py", "self.optimizer.zero_grad(set_to_none=True)", "self.optimizer.zero_grad(set_to_none=False)"),
    ("mmrl/train/backend.py", "clip = self.cfg.train.grad_clip if self.cfg.train.grad_clip > 0 else float(\"inf\")",
     "clip = self.cfg.train.grad_clip if self.cfg.train.grad_clip > 0 else float(\"INF\")"),
    # annotations: _num tests "v is None and allow_none", so allow_none=None behaves as False
    ("mmrl/data/annotations.py", "s, e = _num(seg[0], f, False), _num(seg[1], f, False)",
     "s, e = _num(seg[0], f, None), _num(seg[1], f, False)"),
    ("mmrl/data/annotations.py", "s, e = _num(seg[0], f, False), _num(seg[1], f, False)",
     "s, e = _num(seg[0], f, False), _num(seg[1], f, None)"),
    ("mmrl/data/annotations.py", "t, box = _num(entry[0], f, False), [_num(c, f, False) for c in entry[1]]",
     "t, box = _num(entry[0], f, None), [_num(c, f, False) for c in entry[1]]"),
    ("mmrl/data/annotations.py", "t, box = _num(entry[0], f, False), [_num(c, f, False) for c in entry[1]]",
     "t, box = _num(entry[0], f, False), [_num(c, f, None) for c in entry[1]]"),
    # annotations: the JSON indentation of a written file changes no value that load_samples reads
    ("mmrl/data/annotations.py", "json.dump(items, f, indent=1)", "json.dump(items, f, indent=None)"),
    ("mmrl/data/annotations.py", "json.dump(items, f, indent=1)", "json.dump(items, f, )"),
    ("mmrl/data/annotations.py", "json.dump(items, f, indent=1)", "json.dump(items, f, indent=2)"),
    # views: keys that match at the same position are prefixes of each other, and reverse lexicographic order
    # puts the longer one first just as key=len does; group(1) is group(0) (the \b anchors are zero-width)
    ("mmrl/views/viewset.py", "keys = sorted(m, key=len, reverse=True)", "keys = sorted(m, key=None, reverse=True)"),
    ("mmrl/views/viewset.py", "keys = sorted(m, key=len, reverse=True)", "keys = sorted(m, reverse=True)"),
    ("mmrl/views/viewset.py", "target = pattern.sub(lambda mo: m[mo.group(0)], a)",
     "target = pattern.sub(lambda mo: m[mo.group(1)], a)"),
    # views: _norm is only ever compared with _norm (answers, candidates, map keys, the abstention text)
    ("mmrl/views/viewset.py", "return \" \".join(str(s).lower().split())", "return \" \".join(str(s).upper().split())"),
    # stream rewards: a probe at exactly hi + 1e-9 is the only time "<" and "<=" differ (inside the float tolerance);
    # token_f1 has no common token when either side is empty; a teacher interval starting at the observed time is cut
    # to [t, t], which merge drops
    ("mmrl/rewards/stream.py", "return lo < t <= (rec.first_chunk + rec.n_chunks) * rec.chunk_s + 1e-9",
     "return lo < t < (rec.first_chunk + rec.n_chunks) * rec.chunk_s + 1e-9"),
    ("mmrl/rewards/stream_memory.py", "if not x or not y or common == 0:", "if not x and not y or common == 0:"),
    ("mmrl/rewards/stream_memory.py",
     "seen = [(float(a), min(float(b), observed)) for a, b in teacher if float(a) < observed]",
     "seen = [(float(a), min(float(b), observed)) for a, b in teacher if float(a) <= observed]"),
    # gdpo: pre starts as zeros; the first weighted float64 term promotes it (all weights 0: zeros either way)
    ('mmrl/algos/gdpo.py', 'pre = torch.zeros(first.shape[0], dtype=torch.float64, device=first.device)', 'pre = torch.zeros(first.shape[0], dtype=None, device=first.device)'),
    ('mmrl/algos/gdpo.py', 'pre = torch.zeros(first.shape[0], dtype=torch.float64, device=first.device)', 'pre = torch.zeros(first.shape[0], device=first.device)'),
    # stream_gdpo: the config merges weights into the default mapping that names every role, so the .get default is
    # never read; a float mask marks and tests like a bool one, and one slot more changes nothing; an empty piece's
    # slice is empty; action_weighted refuses an empty batch before the width is read
    ('mmrl/algos/stream_gdpo.py', 'if float(self.params.weights.get(role, 1.0)) == 0.0:', 'if float(self.params.weights.get(role, None)) == 0.0:'),
    ('mmrl/algos/stream_gdpo.py', 'if float(self.params.weights.get(role, 1.0)) == 0.0:', 'if float(self.params.weights.get(role, )) == 0.0:'),
    ('mmrl/algos/stream_gdpo.py', 'if float(self.params.weights.get(role, 1.0)) == 0.0:', 'if float(self.params.weights.get(role, 2.0)) == 0.0:'),
    ('mmrl/algos/stream_gdpo.py', 'weights = {r: float(p.weights.get(r, 1.0)) for r in comps}', 'weights = {r: float(p.weights.get(r, None)) for r in comps}'),
    ('mmrl/algos/stream_gdpo.py', 'weights = {r: float(p.weights.get(r, 1.0)) for r in comps}', 'weights = {r: float(p.weights.get(r, )) for r in comps}'),
    ('mmrl/algos/stream_gdpo.py', 'weights = {r: float(p.weights.get(r, 1.0)) for r in comps}', 'weights = {r: float(p.weights.get(r, 2.0)) for r in comps}'),
    ('mmrl/algos/stream_gdpo.py', 'chars = torch.zeros(len(text) + 1, dtype=torch.bool)', 'chars = torch.zeros(len(text) + 1, dtype=None)'),
    ('mmrl/algos/stream_gdpo.py', 'chars = torch.zeros(len(text) + 1, dtype=torch.bool)', 'chars = torch.zeros(len(text) + 1, )'),
    ('mmrl/algos/stream_gdpo.py', 'chars = torch.zeros(len(text) + 1, dtype=torch.bool)', 'chars = torch.zeros(len(text) + 2, dtype=torch.bool)'),
    ('mmrl/algos/stream_gdpo.py', 'hit[k] = bool(chars[s: s + len(p)].any()) if p else False', 'hit[k] = bool(chars[s: s + len(p)].any()) if (p) or True else False'),
    ('mmrl/algos/stream_gdpo.py', 'width = int(batch.lengths.max()) if len(batch) else 0', 'width = int(batch.lengths.max()) if (len(batch)) or True else 0'),
    ('mmrl/algos/stream_gdpo.py', 'width = int(batch.lengths.max()) if len(batch) else 0', 'width = int(batch.lengths.max()) if len(batch) else 1'),
    # router: float("-INF") is -inf; logits are always [B, K + 2], so dim=+1 is dim=-1; einsum takes upper-case
    # subscripts alike; a start past len(chain) - L gives a slice shorter than the (non-empty) gold chain
    ("mmrl/retrieval/router_policy.py", 'return logits.masked_fill(~mask, float("-inf"))',
     'return logits.masked_fill(~mask, float("-INF"))'),
    ("mmrl/retrieval/router_policy.py", 'logits = logits.masked_fill(~keep, float("-inf"))',
     'logits = logits.masked_fill(~keep, float("-INF"))'),
    ("mmrl/retrieval/router_policy.py", "return torch.log_softmax(logits, dim=-1)", "return torch.log_softmax(logits, dim=+1)"),
    ("mmrl/retrieval/router_policy.py", 'cand_cos = torch.einsum("bd,bkd->bk", s, F.normalize(cands, dim=-1))',
     'cand_cos = torch.einsum("BD,BKD->BK", s, F.normalize(cands, dim=-1))'),
    ("mmrl/retrieval/router_chain.py", "return any(list(chain[i:i + L]) == list(gold) for i in range(len(chain) - L + 1))",
     "return any(list(chain[i:i + L]) == list(gold) for i in range(len(chain) + L + 1))"),
    ("mmrl/retrieval/router_chain.py", "return any(list(chain[i:i + L]) == list(gold) for i in range(len(chain) - L + 1))",
     "return any(list(chain[i:i + L]) == list(gold) for i in range(len(chain) - L + 2))"),
    # router: F.normalize's default dim is 1, which is the last axis of the 2-D states, keys and special embeddings
    ('mmrl/retrieval/router_policy.py', 's = F.normalize(state, dim=-1)', 's = F.normalize(state, )'),
    ('mmrl/retrieval/router_policy.py', 's = F.normalize(state, dim=-1)', 's = F.normalize(state, dim=+1)'),
    ('mmrl/retrieval/router_policy.py', 'spec_cos = s @ F.normalize(special, dim=-1).T', 'spec_cos = s @ F.normalize(special, ).T'),
    ('mmrl/retrieval/router_policy.py', 'spec_cos = s @ F.normalize(special, dim=-1).T', 'spec_cos = s @ F.normalize(special, dim=+1).T'),
    ('mmrl/retrieval/router_policy.py', 'logits = F.normalize(state, dim=-1) @ F.normalize(keys, dim=-1).T / temperature', 'logits = F.normalize(state, ) @ F.normalize(keys, dim=-1).T / temperature'),
    ('mmrl/retrieval/router_policy.py', 'logits = F.normalize(state, dim=-1) @ F.normalize(keys, dim=-1).T / temperature', 'logits = F.normalize(state, dim=+1) @ F.normalize(keys, dim=-1).T / temperature'),
    ('mmrl/retrieval/router_policy.py', 'logits = F.normalize(state, dim=-1) @ F.normalize(keys, dim=-1).T / temperature', 'logits = F.normalize(state, dim=-1) @ F.normalize(keys, ).T / temperature'),
    ('mmrl/retrieval/router_policy.py', 'logits = F.normalize(state, dim=-1) @ F.normalize(keys, dim=-1).T / temperature', 'logits = F.normalize(state, dim=-1) @ F.normalize(keys, dim=+1).T / temperature'),
    # annotations / decode: "UTF-8" is "utf-8"
    ("mmrl/data/annotations.py", "with open(path, encoding=\"utf-8\") as f:", "with open(path, encoding=\"UTF-8\") as f:"),
    ("mmrl/data/annotations.py", "with open(path, \"w\", encoding=\"utf-8\") as f:", "with open(path, \"w\", encoding=\"UTF-8\") as f:"),
    # feature_mask: a coordinate in (1, 2] clipped at 2 instead of 1 gives the same slice (ends are cut at the map's size, a
    # start at or beyond the last row or column gives an empty slice either way)
    ('mmrl/models/feature_mask.py', 'y0, x0, y1, x1 = (min(1.0, max(0.0, float(v))) for v in box)',
     'y0, x0, y1, x1 = (min(2.0, max(0.0, float(v))) for v in box)'),
    # bpo/tgrpo: a float32 operand left as is where the other operand is float64 is promoted to float64 exactly
    # (a float32 value converts to float64 without rounding), so the float64 result is the same
    ('mmrl/algos/bpo.py', 's = torch.zeros(g, dtype=torch.float64, device=rewards.device).index_add_(0, inv, rewards.to(torch.float64) * a)',
     's = torch.zeros(g, dtype=torch.float64, device=rewards.device).index_add_(0, inv, rewards.to(None) * a)'),
    ('mmrl/algos/bpo.py', 's = torch.zeros(k, dtype=torch.float64, device=rewards.device).index_add_(0, inv, rewards.to(torch.float64) * a)',
     's = torch.zeros(k, dtype=torch.float64, device=rewards.device).index_add_(0, inv, rewards.to(None) * a)'),
    ('mmrl/algos/bpo.py', 'adv = rewards.to(torch.float64) - s[inv]',
     'adv = rewards.to(None) - s[inv]'),
    ('mmrl/algos/bpo.py', 'd = rewards.to(torch.float64) - anchor_baseline(rewards, group_ids, roles)',
     'd = rewards.to(None) - anchor_baseline(rewards, group_ids, roles)'),
    ('mmrl/algos/bpo.py', 'num = torch.zeros(k, dtype=torch.float64, device=rewards.device).index_add_(0, inv, rewards.to(torch.float64) * w)',
     'num = torch.zeros(k, dtype=torch.float64, device=rewards.device).index_add_(0, inv, rewards.to(None) * w)'),
    ('mmrl/algos/bpo.py', 'adv = (adv.to(torch.float64) * w.to(torch.float64)).to(adv.dtype)',
     'adv = (adv.to(None) * w.to(torch.float64)).to(adv.dtype)'),
    ('mmrl/algos/bpo.py', 'adv = (adv.to(torch.float64) * w.to(torch.float64)).to(adv.dtype)',
     'adv = (adv.to(torch.float64) * w.to(None)).to(adv.dtype)'),
    ('mmrl/algos/tgrpo.py', 's = torch.zeros(g, dtype=torch.float64, device=x.device).index_add_(0, inv, x.to(torch.float64) * m)',
     's = torch.zeros(g, dtype=torch.float64, device=x.device).index_add_(0, inv, x.to(None) * m)'),
    ('mmrl/algos/tgrpo.py', 'shaped = rewards.to(torch.float64) + b.to(torch.float64)',
     'shaped = rewards.to(None) + b.to(torch.float64)'),
    ('mmrl/algos/tgrpo.py', 'shaped = rewards.to(torch.float64) + b.to(torch.float64)',
     'shaped = rewards.to(torch.float64) + b.to(None)'),
    # bpo/tgrpo/vppo: torch.tensor of Python floats is float32 and of Python bools bool, of Python ints int64, by default
    ('mmrl/algos/bpo.py', 'return torch.tensor(out, dtype=torch.float32)',
     'return torch.tensor(out, dtype=None)'),
    ('mmrl/algos/bpo.py', 'return torch.tensor(out, dtype=torch.float32)',
     'return torch.tensor(out, )'),
    ('mmrl/algos/bpo.py', 'return torch.tensor([ROLE_ALIASES.get(r, r) == "anchor" for r in roles], dtype=torch.bool, device=device)',
     'return torch.tensor([ROLE_ALIASES.get(r, r) == "anchor" for r in roles], dtype=None, device=device)'),
    ('mmrl/algos/bpo.py', 'return torch.tensor([ROLE_ALIASES.get(r, r) == "anchor" for r in roles], dtype=torch.bool, device=device)',
     'return torch.tensor([ROLE_ALIASES.get(r, r) == "anchor" for r in roles], device=device)'),
    ('mmrl/algos/tgrpo.py', 'return torch.tensor([r == SHUFFLED_ROLE for r in roles], dtype=torch.bool, device=device)',
     'return torch.tensor([r == SHUFFLED_ROLE for r in roles], dtype=None, device=device)'),
    ('mmrl/algos/tgrpo.py', 'return torch.tensor([r == SHUFFLED_ROLE for r in roles], dtype=torch.bool, device=device)',
     'return torch.tensor([r == SHUFFLED_ROLE for r in roles], device=device)'),
    ('mmrl/algos/vppo_core.py', 'keep_n = torch.tensor([math.ceil(k * int(x)) for x in m.sum(1)], dtype=torch.long)',
     'keep_n = torch.tensor([math.ceil(k * int(x)) for x in m.sum(1)], dtype=None)'),
    ('mmrl/algos/vppo_core.py', 'keep_n = torch.tensor([math.ceil(k * int(x)) for x in m.sum(1)], dtype=torch.long)',
     'keep_n = torch.tensor([math.ceil(k * int(x)) for x in m.sum(1)], )'),
    # bpo: a one-row batch is its group's anchor, so d = r - b = 0 and the advantage is 0 either way; group_stats with
    # 2 groups of which the second is empty gives group 0 the same std and constancy; pack_scores: an extra empty bucket
    # is never indexed, and an empty batch indexes nothing
    ('mmrl/algos/bpo.py', 'if d.numel() == 0:',
     'if d.numel() == 1:'),
    ('mmrl/algos/bpo.py', '_, std, const = group_stats(d, torch.zeros(d.shape[0], dtype=torch.long, device=d.device), 1, unbiased)',
     '_, std, const = group_stats(d, torch.zeros(d.shape[0], dtype=torch.long, device=d.device), 2, unbiased)'),
    ('mmrl/algos/bpo.py', 'k = int(inv.max()) + 1 if inv.numel() else 0',
     'k = int(inv.max()) + 2 if inv.numel() else 0'),
    ('mmrl/algos/bpo.py', 'k = int(inv.max()) + 1 if inv.numel() else 0',
     'k = int(inv.max()) + 1 if inv.numel() else 1'),
    # spec: parse_params returns an instance of the Params class as is; plan ignores n_views in the base class and
    # T-GRPO; ones(...).to(bool) is the same mask whatever dtype it starts in; every registered spec has a dataclass
    # Params (NoParams at least), so describe always takes asdict and derive_params always finds Params; estimate's
    # specs never read spec.loss
    ('mmrl/algos/spec.py', 'self.params = parse_params(self.Params, params, key) if not isinstance(params, self.Params) else params',
     'self.params = parse_params(self.Params, params, key) if (not isinstance(params, self.Params)) or True else params'),
    ('mmrl/algos/spec.py', 'def plan(self, role: str, n: int, n_views: int = 1) -> int:',
     'def plan(self, role: str, n: int, n_views: int = 2) -> int:'),
    ('mmrl/algos/spec.py', 'mask = out.train_mask if out.train_mask is not None else torch.ones(len(batch), dtype=torch.bool)',
     'mask = out.train_mask if out.train_mask is not None else torch.ones(len(batch), dtype=None)'),
    ('mmrl/algos/spec.py', 'mask = out.train_mask if out.train_mask is not None else torch.ones(len(batch), dtype=torch.bool)',
     'mask = out.train_mask if out.train_mask is not None else torch.ones(len(batch), )'),
    ('mmrl/algos/spec.py', 'return f"{self.name} {dataclasses.asdict(self.params) if dataclasses.is_dataclass(self.params) else self.params}"',
     'return f"{self.name} {dataclasses.asdict(self.params) if (dataclasses.is_dataclass(self.params)) or True else self.params}"'),
    ('mmrl/algos/spec.py', 'for param, source in getattr(getattr(cls, "Params", None), "DERIVED", {}).items():',
     'for param, source in getattr(getattr(cls, "Params", ), "DERIVED", {}).items():'),
    ('mmrl/algos/spec.py', 'spec = build_spec(name, params, LossParams())',
     'spec = build_spec(name, params, None)'),
    ('mmrl/algos/tgrpo.py', 'def plan(self, role: str, n: int, n_views: int = 1) -> int:',
     'def plan(self, role: str, n: int, n_views: int = 2) -> int:'),
    # tgrpo: a 0/1 integer mask combined with & gives the same 0/1 values as a bool one; the metrics' call to
    # tgrpo_temporal_bonus reads only the group condition, which depends on neither the bonus nor the threshold
    ('mmrl/algos/tgrpo.py', 'm = torch.ones_like(acc, dtype=torch.bool) if mask is None else mask.to(torch.bool)',
     'm = torch.ones_like(acc, dtype=torch.bool) if mask is None else mask.to(None)'),
    ('mmrl/algos/tgrpo.py', '_, cond = tgrpo_temporal_bonus(acc, inp.group_ids, shuf, params.mu, params.bonus, params.acc_threshold)',
     '_, cond = tgrpo_temporal_bonus(acc, inp.group_ids, shuf, params.mu, params.acc_threshold)'),
    ('mmrl/algos/tgrpo.py', '_, cond = tgrpo_temporal_bonus(acc, inp.group_ids, shuf, params.mu, params.bonus, params.acc_threshold)',
     '_, cond = tgrpo_temporal_bonus(acc, inp.group_ids, shuf, params.mu, params.bonus, )'),
    # vppo: its base (DAPO -> GRPO) asks for Needs() and gives no train mask in advantages (DAPO filters in select), so
    # the defaults are what is passed; n = (v - lo) / (hi - lo) lies in [0, 1] by construction, so its clamp is a no-op;
    # float("-INF") is -inf; sort's default dim and an arange of shape [T] broadcast the same on the 2-D scores
    ('mmrl/algos/vppo.py', 'return Needs(old=base.old, ref=base.ref, rescore=rescore)',
     'return Needs(ref=base.ref, rescore=rescore)'),
    ('mmrl/algos/vppo.py', 'return Needs(old=base.old, ref=base.ref, rescore=rescore)',
     'return Needs(old=base.old, rescore=rescore)'),
    ('mmrl/algos/vppo.py', 'return AdvantageOutput(advantages=adv, train_mask=out.train_mask, rewards=out.rewards, metrics=metrics)',
     'return AdvantageOutput(advantages=adv, train_mask=None, rewards=out.rewards, metrics=metrics)'),
    ('mmrl/algos/vppo.py', 'return AdvantageOutput(advantages=adv, train_mask=out.train_mask, rewards=out.rewards, metrics=metrics)',
     'return AdvantageOutput(advantages=adv, rewards=out.rewards, metrics=metrics)'),
    ('mmrl/algos/vppo_core.py', 'n = ((v - lo) / (hi - lo)).clamp(0.0, 1.0)',
     'n = ((v - lo) / (hi - lo)).clamp(None, 1.0)'),
    ('mmrl/algos/vppo_core.py', 'n = ((v - lo) / (hi - lo)).clamp(0.0, 1.0)',
     'n = ((v - lo) / (hi - lo)).clamp(0.0, None)'),
    ('mmrl/algos/vppo_core.py', 'n = ((v - lo) / (hi - lo)).clamp(0.0, 1.0)',
     'n = ((v - lo) / (hi - lo)).clamp(0.0, )'),
    ('mmrl/algos/vppo_core.py', 'n = ((v - lo) / (hi - lo)).clamp(0.0, 1.0)',
     'n = ((v - lo) / (hi - lo)).clamp(0.0, 2.0)'),
    ('mmrl/algos/vppo_core.py', 'masked = torch.where(m, s.float(), torch.full_like(s.float(), -float("inf")))',
     'masked = torch.where(m, s.float(), torch.full_like(s.float(), -float("INF")))'),
    ('mmrl/algos/vppo_core.py', 'order = torch.sort(masked, dim=1, descending=True, stable=True).indices',
     'order = torch.sort(masked, descending=True, stable=True).indices'),
    ('mmrl/algos/vppo_core.py', 'rank_ok = torch.arange(s.shape[1]).view(1, -1) < keep_n.view(-1, 1)',
     'rank_ok = torch.arange(s.shape[1]).view(-1) < keep_n.view(-1, 1)'),
    # fastrl: rows of equal advantage within a prompt are adjacent after the sorts whatever their order, and partition ids
    # depend only on the sorted (prompt, A) values, so the first sort's stability changes nothing; idx (nonzero's output)
    # is strictly increasing, so its argsort has no ties; a float or integer 0/1 mask where a bool one is expected is
    # read the same by nonzero(), 'if', cumsum(long) and ones_like(bool keep); |A| of a float32 input converts to float64
    # exactly (same order and ties); a bool 'valid' times float advantages and its int64 row sums give the same mean; the
    # base's Selection mask is already bool; k - k % 1 = k; G'_t = G'_ref gives round(min(G, G)) = G in both branches
    ('mmrl/algos/fastrl.py', 'order = torch.argsort(a, stable=True)',
     'order = torch.argsort(a, )'),
    ('mmrl/algos/fastrl.py', 'order = torch.argsort(a, stable=True)',
     'order = torch.argsort(a, stable=False)'),
    ('mmrl/algos/fastrl.py', 'new = torch.ones(n, dtype=torch.bool)',
     'new = torch.ones(n, dtype=None)'),
    ('mmrl/algos/fastrl.py', 'new = torch.ones(n, dtype=torch.bool)',
     'new = torch.ones(n, )'),
    ('mmrl/algos/fastrl.py', 'elig = torch.ones(n, dtype=torch.bool) if eligible is None else eligible.to(torch.bool).cpu()',
     'elig = torch.ones(n, dtype=None) if eligible is None else eligible.to(torch.bool).cpu()'),
    ('mmrl/algos/fastrl.py', 'elig = torch.ones(n, dtype=torch.bool) if eligible is None else eligible.to(torch.bool).cpu()',
     'elig = torch.ones(n, ) if eligible is None else eligible.to(torch.bool).cpu()'),
    ('mmrl/algos/fastrl.py', 'elig = torch.ones(n, dtype=torch.bool) if eligible is None else eligible.to(torch.bool).cpu()',
     'elig = torch.ones(n, dtype=torch.bool) if eligible is None else eligible.to(None).cpu()'),
    ('mmrl/algos/fastrl.py', 'absa = adv.detach().to(torch.float64).cpu().abs()[idx]',
     'absa = adv.detach().to(None).cpu().abs()[idx]'),
    ('mmrl/algos/fastrl.py', 'order = torch.argsort(idx, stable=True)',
     'order = torch.argsort(idx, )'),
    ('mmrl/algos/fastrl.py', 'order = torch.argsort(idx, stable=True)',
     'order = torch.argsort(idx, stable=False)'),
    ('mmrl/algos/fastrl.py', 'elig = torch.ones(n, dtype=torch.bool) if eligible is None else eligible.to(torch.bool).cpu()',
     'elig = torch.ones(n, dtype=None) if eligible is None else eligible.to(torch.bool).cpu()'),
    ('mmrl/algos/fastrl.py', 'elig = torch.ones(n, dtype=torch.bool) if eligible is None else eligible.to(torch.bool).cpu()',
     'elig = torch.ones(n, ) if eligible is None else eligible.to(torch.bool).cpu()'),
    ('mmrl/algos/fastrl.py', 'elig = torch.ones(n, dtype=torch.bool) if eligible is None else eligible.to(torch.bool).cpu()',
     'elig = torch.ones(n, dtype=torch.bool) if eligible is None else eligible.to(None).cpu()'),
    ('mmrl/algos/fastrl.py', 'absa = adv.detach().to(torch.float64).cpu().abs()',
     'absa = adv.detach().to(None).cpu().abs()'),
    ('mmrl/algos/fastrl.py', 'elig = torch.ones_like(keep, dtype=torch.bool) if eligible is None else eligible.to(torch.bool)',
     'elig = torch.ones_like(keep, dtype=None) if eligible is None else eligible.to(torch.bool)'),
    ('mmrl/algos/fastrl.py', 'elig = torch.ones_like(keep, dtype=torch.bool) if eligible is None else eligible.to(torch.bool)',
     'elig = torch.ones_like(keep, ) if eligible is None else eligible.to(torch.bool)'),
    ('mmrl/algos/fastrl.py', 'valid = (t[None, :] < lengths.to(adv.device)[:, None]).to(adv.dtype)',
     'valid = (t[None, :] < lengths.to(adv.device)[:, None]).to(None)'),
    ('mmrl/algos/fastrl.py', 'elig = sel.train_mask.to(torch.bool)',
     'elig = sel.train_mask.to(None)'),
    ('mmrl/algos/fastrl.py', 'if n_views > 1:',
     'if n_views >= 1:'),
    ('mmrl/algos/fastrl.py', 'if g_t >= g_ref:',
     'if g_t > g_ref:'),
    # dspo: mu, sigma, weights or probabilities left float32 against a float64 operand are promoted exactly; z.sum(0)
    # and z.sum(0, keepdim=True) broadcast alike against z [K, 3]; a box coordinate in (1, 2] gives the same pixel slice
    # as 1 (ends are cut at the image size, a start beyond it gives an empty slice either way); a failed parse has no box,
    # so response_box's test of ok changes nothing; two different step tags cannot start at the same character; a parse's
    # reason defaults to None; _iou's union is positive whenever dspo_evidence calls it (the parser refuses boxes without
    # area, so union >= the response box's area > 0); |Δ| >= 1e-12 and > 1e-12 differ only at exactly 1e-12
    ('mmrl/algos/dspo_math.py', 'd_all = mahalanobis(z.mean(0), mu.to(z), sigma.to(z))',
     'd_all = mahalanobis(z.mean(0), mu.to(None), sigma.to(z))'),
    ('mmrl/algos/dspo_math.py', 'd_all = mahalanobis(z.mean(0), mu.to(z), sigma.to(z))',
     'd_all = mahalanobis(z.mean(0), mu.to(z), sigma.to(None))'),
    ('mmrl/algos/dspo_math.py', 'loo = (z.sum(0, keepdim=True) - z) / (k - 1)  # [K, 3] centroid without candidate k',
     'loo = (z.sum(0, ) - z) / (k - 1)  # [K, 3] centroid without candidate k'),
    ('mmrl/algos/dspo_math.py', 'loo = (z.sum(0, keepdim=True) - z) / (k - 1)  # [K, 3] centroid without candidate k',
     'loo = (z.sum(0, keepdim=False) - z) / (k - 1)  # [K, 3] centroid without candidate k'),
    ('mmrl/algos/dspo_math.py', 'return d_all, mahalanobis(loo, mu.to(z), sigma.to(z)) - d_all',
     'return d_all, mahalanobis(loo, mu.to(None), sigma.to(z)) - d_all'),
    ('mmrl/algos/dspo_math.py', 'return d_all, mahalanobis(loo, mu.to(z), sigma.to(z)) - d_all',
     'return d_all, mahalanobis(loo, mu.to(z), sigma.to(None)) - d_all'),
    ('mmrl/algos/dspo_math.py', 'w = torch.full_like(delta, 1.0 / delta.numel()) if w is None else w.to(delta)',
     'w = torch.full_like(delta, 1.0 / delta.numel()) if w is None else w.to(None)'),
    ('mmrl/algos/dspo_math.py', 'return (p.to(torch.float64) - p_cf.to(torch.float64)) * (1.0 - area_ratio)',
     'return (p.to(None) - p_cf.to(torch.float64)) * (1.0 - area_ratio)'),
    ('mmrl/algos/dspo_math.py', 'return (p.to(torch.float64) - p_cf.to(torch.float64)) * (1.0 - area_ratio)',
     'return (p.to(torch.float64) - p_cf.to(None)) * (1.0 - area_ratio)'),
    ('mmrl/algos/dspo_math.py', 'y0, x0, y1, x1 = (min(1.0, max(0.0, float(v))) for v in box)',
     'y0, x0, y1, x1 = (min(2.0, max(0.0, float(v))) for v in box)'),
    ('mmrl/algos/dspo.py', 'return p.box if p.ok else None',
     'return p.box if (p.ok) or True else None'),
    ('mmrl/rewards/dspo_format.py', 'if any(found[i].start() >= found[i + 1].start() for i in range(3)):',
     'if any(found[i].start() > found[i + 1].start() for i in range(3)):'),
    ('mmrl/rewards/dspo_format.py', 'return DSPOParse(True, None, evidence=evidence, box=tuple(nums), reflection=s2.group(1).strip(),',
     'return DSPOParse(True, evidence=evidence, box=tuple(nums), reflection=s2.group(1).strip(),'),
    ('mmrl/rewards/dspo_rewards.py', 'return inter / union if union > 0 else 0.0',
     'return inter / union if (union > 0) or True else 0.0'),
    ('mmrl/rewards/dspo_rewards.py', 'return inter / union if union > 0 else 0.0',
     'return inter / union if union >= 0 else 0.0'),
    ('mmrl/rewards/dspo_rewards.py', 'return inter / union if union > 0 else 0.0',
     'return inter / union if union > 0 else 1.0'),
    ('mmrl/algos/dspo.py', 'elif abs(self.params.div_weight - w) > 1e-12:',
     'elif abs(self.params.div_weight - w) >= 1e-12:'),
    # pacg: StepBatch declares decode (default None), so getattr finds it without a default; torch.tensor of Python
    # ints is int64 (an empty claim list gives float32, but empty spans are never indexed); on an empty batch zeros(1)
    # gives the same token-EFS mean 0.0; repeat_interleave(lens) is repeat_interleave(arange, lens); a one-claim group has
    # ss = 0, so sqrt(0 / 1) = 0 as the guard gives; float zeros as group ids give the same unique/inverse; an arange of
    # shape [T] broadcasts like [1, T]; a zero advantage times a gain is zero
    # pacg content persistence: with no claims rows and owner (segments_of([])) are both empty, so rows[owner] is the
    # same empty tensor as rows
    ('mmrl/algos/pacg.py', 'pers, cefs = claim_scores(list(inter), list(batch.logprobs), rows[owner] if rows.numel() else rows,',
     'pers, cefs = claim_scores(list(inter), list(batch.logprobs), rows[owner] if (rows.numel()) or True else rows,'),
    ('mmrl/algos/pacg.py', 'decode = getattr(batch, "decode", None)',
     'decode = getattr(batch, "decode", )'),
    ('mmrl/algos/pacg.py', 'rows = torch.tensor([c.row for c in claims], dtype=torch.long)',
     'rows = torch.tensor([c.row for c in claims], dtype=None)'),
    ('mmrl/algos/pacg.py', 'rows = torch.tensor([c.row for c in claims], dtype=torch.long)',
     'rows = torch.tensor([c.row for c in claims], )'),
    ('mmrl/algos/pacg.py', 'starts = torch.tensor([c.tok_start for c in claims], dtype=torch.long)',
     'starts = torch.tensor([c.tok_start for c in claims], dtype=None)'),
    ('mmrl/algos/pacg.py', 'starts = torch.tensor([c.tok_start for c in claims], dtype=torch.long)',
     'starts = torch.tensor([c.tok_start for c in claims], )'),
    ('mmrl/algos/pacg.py', 'ends = torch.tensor([c.tok_end for c in claims], dtype=torch.long)',
     'ends = torch.tensor([c.tok_end for c in claims], dtype=None)'),
    ('mmrl/algos/pacg.py', 'ends = torch.tensor([c.tok_end for c in claims], dtype=torch.long)',
     'ends = torch.tensor([c.tok_end for c in claims], )'),
    ('mmrl/algos/pacg.py', 'tok_efs = torch.cat([efs_tokens(log_ratio(a, o)) for a, o in zip(inter, batch.logprobs)]) if len(batch) else torch.zeros(0)',
     'tok_efs = torch.cat([efs_tokens(log_ratio(a, o)) for a, o in zip(inter, batch.logprobs)]) if len(batch) else torch.zeros(1)'),
    ('mmrl/algos/pacg_gate.py', 'base = torch.tensor([0] + [int(v.numel()) for v in values], dtype=torch.long).cumsum(0)[:-1]',
     'base = torch.tensor([0] + [int(v.numel()) for v in values], dtype=None).cumsum(0)[:-1]'),
    ('mmrl/algos/pacg_gate.py', 'base = torch.tensor([0] + [int(v.numel()) for v in values], dtype=torch.long).cumsum(0)[:-1]',
     'base = torch.tensor([0] + [int(v.numel()) for v in values], ).cumsum(0)[:-1]'),
    ('mmrl/algos/pacg_gate.py', 'owner = torch.repeat_interleave(torch.arange(rows.numel()), lens)',
     'owner = torch.repeat_interleave(lens)'),
    ('mmrl/algos/pacg_gate.py', 'std = torch.where(counts > 1, (ss / (counts - 1).clamp(min=1)).sqrt(), torch.zeros_like(ss))',
     'std = torch.where(counts >= 1, (ss / (counts - 1).clamp(min=1)).sqrt(), torch.zeros_like(ss))'),
    ('mmrl/algos/pacg_gate.py', 'groups = torch.zeros(c, dtype=torch.long)',
     'groups = torch.zeros(c, dtype=None)'),
    ('mmrl/algos/pacg_gate.py', 'groups = torch.zeros(c, dtype=torch.long)',
     'groups = torch.zeros(c, )'),
    ('mmrl/algos/pacg_gate.py', 'valid = torch.arange(t).view(1, -1) < torch.tensor([int(x) for x in lengths]).view(-1, 1)',
     'valid = torch.arange(t).view(-1) < torch.tensor([int(x) for x in lengths]).view(-1, 1)'),
    ('mmrl/algos/pacg_gate.py', 'return torch.where(adv > 0, adv * g, adv)',
     'return torch.where(adv >= 0, adv * g, adv)'),
    # stream_env: findall on 'XXXX' finds no tag, as on ''; with no verb the name 'XXXX' is no action kind either, so
    # the action is unknown_action as with ''; the stream environment calls memory_recall.fn directly and never reads the
    # episode's tool budget; the initial error text is never read (every step sets it before the next observation); a
    # no_think action has an empty think (parse_action does not keep one), so the guard is already False
    ('mmrl/stream/actions.py', 'thinks = _THINK.findall(text or "")',
     'thinks = _THINK.findall(text or "XXXX")'),
    ('mmrl/stream/actions.py', 'actions = _ACTION.findall(text or "")',
     'actions = _ACTION.findall(text or "XXXX")'),
    ('mmrl/stream/actions.py', 'name = verb.group(1).lower() if verb else ""',
     'name = verb.group(1).lower() if verb else "XXXX"'),
    ('mmrl/stream/actions.py', 'blocks = _MEMORY.findall(text or "")',
     'blocks = _MEMORY.findall(text or "XXXX")'),
    ('mmrl/stream/env.py', 'self.state = EpisodeState(sample=sample, media=None, budget=ToolBudget(max_calls=10 ** 6),',
     'self.state = EpisodeState(sample=sample, media=None, budget=None,'),
    ('mmrl/stream/env.py', 'self.state = EpisodeState(sample=sample, media=None, budget=ToolBudget(max_calls=10 ** 6),',
     'self.state = EpisodeState(sample=sample, media=None, budget=ToolBudget(max_calls=None),'),
    ('mmrl/stream/env.py', 'self.state = EpisodeState(sample=sample, media=None, budget=ToolBudget(max_calls=10 ** 6),',
     'self.state = EpisodeState(sample=sample, media=None, budget=ToolBudget(max_calls=10 * 6),'),
    ('mmrl/stream/env.py', 'self.state = EpisodeState(sample=sample, media=None, budget=ToolBudget(max_calls=10 ** 6),',
     'self.state = EpisodeState(sample=sample, media=None, budget=ToolBudget(max_calls=11 ** 6),'),
    ('mmrl/stream/env.py', 'self.state = EpisodeState(sample=sample, media=None, budget=ToolBudget(max_calls=10 ** 6),',
     'self.state = EpisodeState(sample=sample, media=None, budget=ToolBudget(max_calls=10 ** 7),'),
    ('mmrl/stream/env.py', 'self.k, self.sub, self.shown, self.error = block.first_chunk, 0, set(), ""',
     'self.k, self.sub, self.shown, self.error = block.first_chunk, 0, set(), "XXXX"'),
    ('mmrl/stream/env.py', 'if action.think and action.reason not in ("no_think", "multiple_thinks"):',
     'if action.think and action.reason not in ("XXno_thinkXX", "multiple_thinks"):'),
    ('mmrl/stream/env.py', 'if action.think and action.reason not in ("no_think", "multiple_thinks"):',
     'if action.think and action.reason not in ("NO_THINK", "multiple_thinks"):'),
    # views: an integer arange squared and divided by a Python float is float32, as the float32 arange gives (the same kernel)
    ('mmrl/views/transforms.py', 'k = torch.exp(-(torch.arange(-r, r + 1, dtype=torch.float32) ** 2) / (2 * sigma**2))',
     'k = torch.exp(-(torch.arange(-r, r + 1, dtype=None) ** 2) / (2 * sigma**2))'),
    ('mmrl/views/transforms.py', 'k = torch.exp(-(torch.arange(-r, r + 1, dtype=torch.float32) ** 2) / (2 * sigma**2))',
     'k = torch.exp(-(torch.arange(-r, r + 1, ) ** 2) / (2 * sigma**2))'),
    # views: the blur is a convex combination of uint8 values (positive kernel, normalised), so after round() it lies in
    # [0, 255]: clamp's bounds None / 256 change nothing; a 1-pixel frame blurred with replicate borders is itself
    ('mmrl/views/transforms.py', 'return y.round().clamp(0, 255).to(torch.uint8).reshape(n, c, h, w)',
     'return y.round().clamp(None, 255).to(torch.uint8).reshape(n, c, h, w)'),
    ('mmrl/views/transforms.py', 'return y.round().clamp(0, 255).to(torch.uint8).reshape(n, c, h, w)',
     'return y.round().clamp(0, None).to(torch.uint8).reshape(n, c, h, w)'),
    ('mmrl/views/transforms.py', 'return y.round().clamp(0, 255).to(torch.uint8).reshape(n, c, h, w)',
     'return y.round().clamp(0, ).to(torch.uint8).reshape(n, c, h, w)'),
    ('mmrl/views/transforms.py', 'return y.round().clamp(0, 255).to(torch.uint8).reshape(n, c, h, w)',
     'return y.round().clamp(0, 256).to(torch.uint8).reshape(n, c, h, w)'),
    ('mmrl/views/transforms.py', 'if sigma <= 0 or x.numel() == 0:',
     'if sigma <= 0 or x.numel() == 1:'),
    # views: torch.einsum accepts upper-case subscripts: the same contraction
    ('mmrl/views/image_transforms.py', 'm = torch.einsum("tb,bh,bw->thw", sel.float(), in_r.float(), in_c.float()) > 0',
     'm = torch.einsum("TB,BH,BW->THW", sel.float(), in_r.float(), in_c.float()) > 0'),
    # views: the anchor is always the first spec (_parse_qtype puts it first), so anchor_expected is set before it is read
    ('mmrl/views/viewset.py', 'anchor_expected = None',
     'anchor_expected = ""'),
    # views: when a view needs a change, _keep_unchanged raises whatever mode says ("mode == 'error' or needs_change"),
    # with the same message; any mode other than 'skip' and 'error' keeps the view, as 'keep' does
    ('mmrl/views/viewset.py', 'mode = s.if_unchanged or ("error" if needs_change else "keep")',
     'mode = s.if_unchanged or ("error" if (needs_change) and False else "keep")'),
    ('mmrl/views/viewset.py', 'mode = s.if_unchanged or ("error" if needs_change else "keep")',
     'mode = s.if_unchanged or ("XXerrorXX" if needs_change else "keep")'),
    ('mmrl/views/viewset.py', 'mode = s.if_unchanged or ("error" if needs_change else "keep")',
     'mode = s.if_unchanged or ("ERROR" if needs_change else "keep")'),
    ('mmrl/views/viewset.py', 'mode = s.if_unchanged or ("error" if needs_change else "keep")',
     'mode = s.if_unchanged or ("error" if needs_change else "XXkeepXX")'),
    ('mmrl/views/viewset.py', 'mode = s.if_unchanged or ("error" if needs_change else "keep")',
     'mode = s.if_unchanged or ("error" if needs_change else "KEEP")'),
    # multiturn: observation_text renders a throw-away system turn and keeps only what follows its first '<|im_end|>\n':
    # whatever that turn holds (its content under another key, a part without 'type' or 'text', other text) is cut
    # off; apply_chat_template's tokenize defaults to False in transformers' processors
    ('mmrl/rollout/agent_loop_multi.py', 'system = {"role": "system", "content": [{"type": "text", "text": "-"}]}',
     'system = {"role": "system", "XXcontentXX": [{"type": "text", "text": "-"}]}'),
    ('mmrl/rollout/agent_loop_multi.py', 'system = {"role": "system", "content": [{"type": "text", "text": "-"}]}',
     'system = {"role": "system", "CONTENT": [{"type": "text", "text": "-"}]}'),
    ('mmrl/rollout/agent_loop_multi.py', 'system = {"role": "system", "content": [{"type": "text", "text": "-"}]}',
     'system = {"role": "system", "content": [{"XXtypeXX": "text", "text": "-"}]}'),
    ('mmrl/rollout/agent_loop_multi.py', 'system = {"role": "system", "content": [{"type": "text", "text": "-"}]}',
     'system = {"role": "system", "content": [{"TYPE": "text", "text": "-"}]}'),
    ('mmrl/rollout/agent_loop_multi.py', 'system = {"role": "system", "content": [{"type": "text", "text": "-"}]}',
     'system = {"role": "system", "content": [{"type": "XXtextXX", "text": "-"}]}'),
    ('mmrl/rollout/agent_loop_multi.py', 'system = {"role": "system", "content": [{"type": "text", "text": "-"}]}',
     'system = {"role": "system", "content": [{"type": "TEXT", "text": "-"}]}'),
    ('mmrl/rollout/agent_loop_multi.py', 'system = {"role": "system", "content": [{"type": "text", "text": "-"}]}',
     'system = {"role": "system", "content": [{"type": "text", "XXtextXX": "-"}]}'),
    ('mmrl/rollout/agent_loop_multi.py', 'system = {"role": "system", "content": [{"type": "text", "text": "-"}]}',
     'system = {"role": "system", "content": [{"type": "text", "TEXT": "-"}]}'),
    ('mmrl/rollout/agent_loop_multi.py', 'system = {"role": "system", "content": [{"type": "text", "text": "-"}]}',
     'system = {"role": "system", "content": [{"type": "text", "text": "XX-XX"}]}'),
    ('mmrl/rollout/agent_loop_multi.py', 'full = processor.apply_chat_template([system, _message(obs)], tokenize=False, add_generation_prompt=True)',
     'full = processor.apply_chat_template([system, _message(obs)], add_generation_prompt=True)'),
    # multiturn: the placeholder Media has no pixels, so every reader skips it (_has_media, _media_kwargs, _split_batch,
    # vllm_inputs._medias) and its sample id is never read
    ('mmrl/rollout/agent_loop_multi.py', 'return Media(sample_id="observation")',
     'return Media(sample_id=None)'),
    ('mmrl/rollout/agent_loop_multi.py', 'return Media(sample_id="observation")',
     'return Media(sample_id="XXobservationXX")'),
    ('mmrl/rollout/agent_loop_multi.py', 'return Media(sample_id="observation")',
     'return Media(sample_id="OBSERVATION")'),
    # multiturn: PromptInputs.media defaults to None; torch.full with a bool fill is bool without dtype (also in
    # _trajectory); collate_vision adds nothing for a segment without vision; for_scoring=None is falsy
    ('mmrl/rollout/agent_loop_multi.py', 'media=None)',
     ')'),
    ('mmrl/rollout/agent_loop_multi.py', 'trained = torch.cat([torch.full((s.ids.numel(),), s.trained, dtype=torch.bool) for s in segments]',
     'trained = torch.cat([torch.full((s.ids.numel(),), s.trained, dtype=None) for s in segments]'),
    ('mmrl/rollout/agent_loop_multi.py', 'trained = torch.cat([torch.full((s.ids.numel(),), s.trained, dtype=torch.bool) for s in segments]',
     'trained = torch.cat([torch.full((s.ids.numel(),), s.trained, ) for s in segments]'),
    ('mmrl/rollout/agent_loop_multi.py', 'mask = torch.cat([torch.full((s.ids.numel(),), s.trained, dtype=torch.bool) for s in segs])',
     'mask = torch.cat([torch.full((s.ids.numel(),), s.trained, dtype=None) for s in segs])'),
    ('mmrl/rollout/agent_loop_multi.py', 'mask = torch.cat([torch.full((s.ids.numel(),), s.trained, dtype=torch.bool) for s in segs])',
     'mask = torch.cat([torch.full((s.ids.numel(),), s.trained, ) for s in segs])'),
    ('mmrl/rollout/agent_loop_multi.py', 'vis += [s] if s.vision else []',
     'vis += [s] if (s.vision) or True else []'),
    ('mmrl/rollout/agent_loop_multi.py', 'return self.prompt if not self.segments else sequence_inputs(self.prompt, self.segments, for_scoring=False)',
     'return self.prompt if not self.segments else sequence_inputs(self.prompt, self.segments, for_scoring=None)'),
    # multiturn: getattr defaults None and False are both falsy where they are read; RolloutRequest.n defaults to 1;
    # torch.tensor of a Python int is int64 (long); the processor's ids are int64, so to(ids.dtype) is to(long)
    ('mmrl/rollout/agent_loop_multi.py', 'if not getattr(engine, "supports_sequences", False):',
     'if not getattr(engine, "supports_sequences", None):'),
    ('mmrl/rollout/agent_loop_multi.py', 'reuse = self.reuse_cache and getattr(engine, "supports_kv_reuse", False)',
     'reuse = self.reuse_cache and getattr(engine, "supports_kv_reuse", None)'),
    ('mmrl/rollout/agent_loop_multi.py', 'last = RolloutRequest(inputs=inputs, n=1, sample_id=src.sample_id, group_id=src.group_id,',
     'last = RolloutRequest(inputs=inputs, sample_id=src.sample_id, group_id=src.group_id,'),
    ('mmrl/rollout/agent_loop_multi.py', 'close = torch.tensor([self.im_end], dtype=torch.long)',
     'close = torch.tensor([self.im_end], dtype=None)'),
    ('mmrl/rollout/agent_loop_multi.py', 'close = torch.tensor([self.im_end], dtype=torch.long)',
     'close = torch.tensor([self.im_end], )'),
    ('mmrl/rollout/agent_loop_multi.py', 'ids, types = torch.cat([close.to(ids.dtype), ids]), torch.cat([types.new_zeros(1), types])',
     'ids, types = torch.cat([close.to(None), ids]), torch.cat([types.new_zeros(1), types])'),
    # scorer: dtypes that come out the same or are cast where read: torch.tensor of Python ints and torch.full with an
    # int fill are int64; responses are int64 token ids already; a trained mask stays bool and is read through .bool();
    # position ids as float32 ones hold small exact integers and the rotary embedding casts them to float
    ('mmrl/models/prefill.py', 'out = torch.ones((3, len(prompts), width), dtype=torch.long, device=device)',
     'out = torch.ones((3, len(prompts), width), dtype=None, device=device)'),
    ('mmrl/models/prefill.py', 'out = torch.ones((3, len(prompts), width), dtype=torch.long, device=device)',
     'out = torch.ones((3, len(prompts), width), device=device)'),
    ('mmrl/models/prefill.py', 'return uniq, torch.tensor(owner, dtype=torch.long)',
     'return uniq, torch.tensor(owner, dtype=None)'),
    ('mmrl/models/prefill.py', 'return uniq, torch.tensor(owner, dtype=torch.long)',
     'return uniq, torch.tensor(owner, )'),
    ('mmrl/models/prefill.py', 'lengths = torch.tensor([p.num_tokens for p in prompts], dtype=torch.long, device=device)',
     'lengths = torch.tensor([p.num_tokens for p in prompts], dtype=None, device=device)'),
    ('mmrl/models/prefill.py', 'lengths = torch.tensor([p.num_tokens for p in prompts], dtype=torch.long, device=device)',
     'lengths = torch.tensor([p.num_tokens for p in prompts], device=device)'),
    ('mmrl/models/prefill.py', 'sel = pad_right([t.to(device=hidden.device, dtype=torch.long) for t in trained] + [rlen.new_zeros(R)], 0)[:-1]',
     'sel = pad_right([t.to(device=hidden.device, dtype=None) for t in trained] + [rlen.new_zeros(R)], 0)[:-1]'),
    ('mmrl/models/prefill.py', 'sel = pad_right([t.to(device=hidden.device, dtype=torch.long) for t in trained] + [rlen.new_zeros(R)], 0)[:-1]',
     'sel = pad_right([t.to(device=hidden.device, ) for t in trained] + [rlen.new_zeros(R)], 0)[:-1]'),
    ('mmrl/models/scoring.py', 'resp = [r.to(device=device, dtype=torch.long) for _, r in chunk]',
     'resp = [r.to(device=device, dtype=None) for _, r in chunk]'),
    ('mmrl/models/scoring.py', 'resp = [r.to(device=device, dtype=torch.long) for _, r in chunk]',
     'resp = [r.to(device=device, ) for _, r in chunk]'),
    ('mmrl/models/scoring.py', 'rlen = torch.tensor([int(r.numel()) for r in resp], dtype=torch.long, device=device)',
     'rlen = torch.tensor([int(r.numel()) for r in resp], dtype=None, device=device)'),
    ('mmrl/models/scoring.py', 'rlen = torch.tensor([int(r.numel()) for r in resp], dtype=torch.long, device=device)',
     'rlen = torch.tensor([int(r.numel()) for r in resp], device=device)'),
    ('mmrl/models/scoring.py', 'seqs = [torch.cat([p.input_ids, r.to(p.input_ids.dtype)]) for p, r in chunk]',
     'seqs = [torch.cat([p.input_ids, r.to(None)]) for p, r in chunk]'),
    ('mmrl/models/scoring.py', 'rows.append(torch.full((R,), i, dtype=torch.long))',
     'rows.append(torch.full((R,), i, dtype=None))'),
    ('mmrl/models/scoring.py', 'rows.append(torch.full((R,), i, dtype=torch.long))',
     'rows.append(torch.full((R,), i, ))'),
    ('mmrl/models/scoring.py', 'resp = [r.to(device=device, dtype=torch.long) for _, r in chunk]',
     'resp = [r.to(device=device, dtype=None) for _, r in chunk]'),
    ('mmrl/models/scoring.py', 'resp = [r.to(device=device, dtype=torch.long) for _, r in chunk]',
     'resp = [r.to(device=device, ) for _, r in chunk]'),
    ('mmrl/models/scoring.py', 'rlen = torch.tensor([int(r.numel()) for r in resp], dtype=torch.long, device=device)',
     'rlen = torch.tensor([int(r.numel()) for r in resp], dtype=None, device=device)'),
    ('mmrl/models/scoring.py', 'rlen = torch.tensor([int(r.numel()) for r in resp], dtype=torch.long, device=device)',
     'rlen = torch.tensor([int(r.numel()) for r in resp], device=device)'),
    ('mmrl/models/scoring.py', 'resp = [r.to(device=device, dtype=torch.long) for _, r in chunk]',
     'resp = [r.to(device=device, dtype=None) for _, r in chunk]'),
    ('mmrl/models/scoring.py', 'resp = [r.to(device=device, dtype=torch.long) for _, r in chunk]',
     'resp = [r.to(device=device, ) for _, r in chunk]'),
    ('mmrl/models/scoring.py', 'rlen = torch.tensor([int(r.numel()) for r in resp], dtype=torch.long, device=device)',
     'rlen = torch.tensor([int(r.numel()) for r in resp], dtype=None, device=device)'),
    ('mmrl/models/scoring.py', 'rlen = torch.tensor([int(r.numel()) for r in resp], dtype=torch.long, device=device)',
     'rlen = torch.tensor([int(r.numel()) for r in resp], device=device)'),
    ('mmrl/models/sequence_scoring.py', 'rows = torch.cat([torch.full((int(lengths[i]) - s.prompt_len,), i, dtype=torch.long) for i, s in enumerate(seqs)])',
     'rows = torch.cat([torch.full((int(lengths[i]) - s.prompt_len,), i, dtype=None) for i, s in enumerate(seqs)])'),
    ('mmrl/models/sequence_scoring.py', 'rows = torch.cat([torch.full((int(lengths[i]) - s.prompt_len,), i, dtype=torch.long) for i, s in enumerate(seqs)])',
     'rows = torch.cat([torch.full((int(lengths[i]) - s.prompt_len,), i, ) for i, s in enumerate(seqs)])'),
    ('mmrl/models/sequence_scoring.py', 'resp = [r.to(device=device, dtype=torch.long) for _, r in chunk]',
     'resp = [r.to(device=device, dtype=None) for _, r in chunk]'),
    ('mmrl/models/sequence_scoring.py', 'resp = [r.to(device=device, dtype=torch.long) for _, r in chunk]',
     'resp = [r.to(device=device, ) for _, r in chunk]'),
    ('mmrl/models/sequence_scoring.py', 'rlen = torch.tensor([int(r.numel()) for r in resp], dtype=torch.long, device=device)',
     'rlen = torch.tensor([int(r.numel()) for r in resp], dtype=None, device=device)'),
    ('mmrl/models/sequence_scoring.py', 'rlen = torch.tensor([int(r.numel()) for r in resp], dtype=torch.long, device=device)',
     'rlen = torch.tensor([int(r.numel()) for r in resp], device=device)'),
    ('mmrl/models/sequence_scoring.py', 'tail_pos = torch.zeros((3, N, W), dtype=torch.long, device=device)',
     'tail_pos = torch.zeros((3, N, W), dtype=None, device=device)'),
    ('mmrl/models/sequence_scoring.py', 'tail_pos = torch.zeros((3, N, W), dtype=torch.long, device=device)',
     'tail_pos = torch.zeros((3, N, W), device=device)'),
    # scorer: a 1-D arange broadcasts against [N, 1] (or [U, 1, 1]) exactly as the [1, L] view; expand(3, -1) of [P] is [3, P]
    ('mmrl/models/prefill.py', 'pos = starts.view(-1, 1) + torch.arange(length, device=starts.device).view(1, -1)',
     'pos = starts.view(-1, 1) + torch.arange(length, device=starts.device).view(-1)'),
    ('mmrl/models/prefill.py', 'pos, nxt = torch.arange(p.num_tokens).view(1, -1).expand(3, -1).clone(), p.num_tokens',
     'pos, nxt = torch.arange(p.num_tokens).view(-1).expand(3, -1).clone(), p.num_tokens'),
    ('mmrl/models/prefill.py', 'return ids, lengths, (torch.arange(ids.shape[1], device=device).view(1, -1) < lengths.view(-1, 1)).long()',
     'return ids, lengths, (torch.arange(ids.shape[1], device=device).view(-1) < lengths.view(-1, 1)).long()'),
    ('mmrl/models/prefill.py', 'valid = torch.arange(R, device=hidden.device).view(1, -1) < rlen.view(-1, 1)',
     'valid = torch.arange(R, device=hidden.device).view(-1) < rlen.view(-1, 1)'),
    ('mmrl/models/scoring.py', 'own = (q.view(-1, 1) // w == q.view(1, -1) // w) & (q.view(1, -1) <= q.view(-1, 1))  # [Q, Q] block-causal',
     'own = (q.view(-1, 1) // w == q.view(-1) // w) & (q.view(1, -1) <= q.view(-1, 1))  # [Q, Q] block-causal'),
    ('mmrl/models/scoring.py', 'own = (q.view(-1, 1) // w == q.view(1, -1) // w) & (q.view(1, -1) <= q.view(-1, 1))  # [Q, Q] block-causal',
     'own = (q.view(-1, 1) // w == q.view(1, -1) // w) & (q.view(-1) <= q.view(-1, 1))  # [Q, Q] block-causal'),
    ('mmrl/models/scoring.py', 'pos = (start.view(U, 1, 1) + torch.arange(W, device=device).view(1, 1, W)).expand(U, K, W).reshape(U, K * W)',
     'pos = (start.view(U, 1, 1) + torch.arange(W, device=device).view(1, W)).expand(U, K, W).reshape(U, K * W)'),
    ('mmrl/models/scoring.py', 'pos = (start.view(U, 1, 1) + torch.arange(W, device=device).view(1, 1, W)).expand(U, K, W).reshape(U, K * W)',
     'pos = (start.view(U, 1, 1) + torch.arange(W, device=device).view(1, W)).expand(U, K, W).reshape(U, K * W)'),
    ('mmrl/models/scoring.py', 'rpos = (start.view(U, 1, 1) + torch.arange(W, device=device).view(1, 1, W)).expand(U, K, W).reshape(U, K * W)',
     'rpos = (start.view(U, 1, 1) + torch.arange(W, device=device).view(1, W)).expand(U, K, W).reshape(U, K * W)'),
    ('mmrl/models/scoring.py', 'rpos = (start.view(U, 1, 1) + torch.arange(W, device=device).view(1, 1, W)).expand(U, K, W).reshape(U, K * W)',
     'rpos = (start.view(U, 1, 1) + torch.arange(W, device=device).view(1, W)).expand(U, K, W).reshape(U, K * W)'),
    ('mmrl/models/scoring.py', 'pos = start[owner].view(N, 1) + torch.arange(W, device=device).view(1, W)',
     'pos = start[owner].view(N, 1) + torch.arange(W, device=device).view(W)'),
    # scorer: a wider response block (W + 2) or an extra empty slot adds pad columns after every response; the masks are
    # causal / block-causal, so no real token attends to them, and hidden states are cut to [:, :R]
    ('mmrl/models/scoring.py', 'W, K, U = max(R - 1, 1), int(slot.max()) + 1, len(uniq)',
     'W, K, U = max(R + 1, 1), int(slot.max()) + 1, len(uniq)'),
    ('mmrl/models/scoring.py', 'W, K, U = max(R - 1, 1), int(slot.max()) + 1, len(uniq)',
     'W, K, U = max(R - 1, 2), int(slot.max()) + 1, len(uniq)'),
    ('mmrl/models/scoring.py', 'W, K, U = max(R - 1, 1), int(slot.max()) + 1, len(uniq)',
     'W, K, U = max(R - 1, 1), int(slot.max()) + 2, len(uniq)'),
    ('mmrl/models/scoring.py', 'W, K, U, P = max(R - 1, 1), int(slot.max()) + 1, len(uniq), pids.shape[1]',
     'W, K, U, P = max(R + 1, 1), int(slot.max()) + 1, len(uniq), pids.shape[1]'),
    ('mmrl/models/scoring.py', 'W, K, U, P = max(R - 1, 1), int(slot.max()) + 1, len(uniq), pids.shape[1]',
     'W, K, U, P = max(R - 1, 2), int(slot.max()) + 1, len(uniq), pids.shape[1]'),
    ('mmrl/models/scoring.py', 'W, K, U, P = max(R - 1, 1), int(slot.max()) + 1, len(uniq), pids.shape[1]',
     'W, K, U, P = max(R - 1, 1), int(slot.max()) + 2, len(uniq), pids.shape[1]'),
    ('mmrl/models/scoring.py', 'W, N, P = max(R - 1, 1), len(chunk), pmask.shape[1]  # a dummy column when no response has a second token (ZeRO-3)',
     'W, N, P = max(R + 1, 1), len(chunk), pmask.shape[1]  # a dummy column when no response has a second token (ZeRO-3)'),
    ('mmrl/models/scoring.py', 'W, N, P = max(R - 1, 1), len(chunk), pmask.shape[1]  # a dummy column when no response has a second token (ZeRO-3)',
     'W, N, P = max(R - 1, 2), len(chunk), pmask.shape[1]  # a dummy column when no response has a second token (ZeRO-3)'),
    ('mmrl/models/sequence_scoring.py', 'N, P, W = len(seqs), pmask.shape[1], max(int(rlen.max()) - 1, 1)  # a dummy column when every response is 1 token',
     'N, P, W = len(seqs), pmask.shape[1], max(int(rlen.max()) + 1, 1)  # a dummy column when every response is 1 token'),
    ('mmrl/models/sequence_scoring.py', 'N, P, W = len(seqs), pmask.shape[1], max(int(rlen.max()) - 1, 1)  # a dummy column when every response is 1 token',
     'N, P, W = len(seqs), pmask.shape[1], max(int(rlen.max()) - 1, 2)  # a dummy column when every response is 1 token'),
    # scorer: dim +1 of 2-D logits is dim -1; unsqueeze/squeeze(+1) of [N] / [N, 1] are the -1 ones; squeeze(-2) of [N, 1]
    # leaves [N, 1], which masked_scatter and split read in the same order; prod(+1) of [n, 3] grids is prod(-1)
    ('mmrl/models/prefill.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[valid].unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=+1).gather(-1, targets[valid].unsqueeze(-1)).squeeze(-1)'),
    ('mmrl/models/prefill.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[valid].unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(+1, targets[valid].unsqueeze(-1)).squeeze(-1)'),
    ('mmrl/models/prefill.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[valid].unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[valid].unsqueeze(+1)).squeeze(-1)'),
    ('mmrl/models/prefill.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[valid].unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[valid].unsqueeze(-1)).squeeze(+1)'),
    ('mmrl/models/prefill.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[sel].unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=+1).gather(-1, targets[sel].unsqueeze(-1)).squeeze(-1)'),
    ('mmrl/models/prefill.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[sel].unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(+1, targets[sel].unsqueeze(-1)).squeeze(-1)'),
    ('mmrl/models/prefill.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[sel].unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[sel].unsqueeze(+1)).squeeze(-1)'),
    ('mmrl/models/prefill.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[sel].unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[sel].unsqueeze(-1)).squeeze(+1)'),
    ('mmrl/models/prefill.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[sel].unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets[sel].unsqueeze(-1)).squeeze(-2)'),
    ('mmrl/models/scoring.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=+1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)'),
    ('mmrl/models/scoring.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(+1, targets.unsqueeze(-1)).squeeze(-1)'),
    ('mmrl/models/scoring.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(+1)).squeeze(-1)'),
    ('mmrl/models/scoring.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(+1)'),
    ('mmrl/models/sequence_scoring.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=+1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)'),
    ('mmrl/models/sequence_scoring.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(+1, targets.unsqueeze(-1)).squeeze(-1)'),
    ('mmrl/models/sequence_scoring.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(+1)).squeeze(-1)'),
    ('mmrl/models/sequence_scoring.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(+1)'),
    ('mmrl/models/sequence_scoring.py', 'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)',
     'lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-2)'),
    ('mmrl/models/sequence_scoring.py', 'out[pix] = seq.vision[pix][int(pv[grid].prod(-1).sum()) if n else 0:]',
     'out[pix] = seq.vision[pix][int(pv[grid].prod(+1).sum()) if n else 0:]'),
    # scorer: scoring_strategy ignores its prompt_tokens argument; defaults every caller overrides (micro_batch, pad_id,
    # temperature of mixed_logprobs); chunking and the pad id change no log-prob (padding is masked); placeholders
    # in mixed_logprobs' output are all overwritten
    ('mmrl/models/scoring.py', 'name = scoring_strategy(0, n, max_new_tokens)',
     'name = scoring_strategy(None, n, max_new_tokens)'),
    ('mmrl/models/scoring.py', 'name = scoring_strategy(0, n, max_new_tokens)',
     'name = scoring_strategy(1, n, max_new_tokens)'),
    ('mmrl/models/scoring.py', 'micro_batch: int = 16, pad_id: int = 0, strategy: str = "auto") -> List[torch.Tensor]:',
     'micro_batch: int = 17, pad_id: int = 0, strategy: str = "auto") -> List[torch.Tensor]:'),
    ('mmrl/models/scoring.py', 'micro_batch: int = 16, pad_id: int = 0, strategy: str = "auto") -> List[torch.Tensor]:',
     'micro_batch: int = 16, pad_id: int = 1, strategy: str = "auto") -> List[torch.Tensor]:'),
    ('mmrl/models/scoring.py', 'return mixed_logprobs(model, items, temperature, micro_batch, pad_id)',
     'return mixed_logprobs(model, items, temperature, micro_batch, )'),
    ('mmrl/models/scoring.py', 'return scoring_strategy(max(p.num_tokens for p in uniq), n, max(int(r.numel()) for _, r in chunk))',
     'return scoring_strategy(None, n, max(int(r.numel()) for _, r in chunk))'),
    ('mmrl/models/scoring.py', 'def mixed_logprobs(model, items: Sequence[Tuple[PromptInputs, torch.Tensor]], temperature: float = 1.0,',
     'def mixed_logprobs(model, items: Sequence[Tuple[PromptInputs, torch.Tensor]], temperature: float = 2.0,'),
    ('mmrl/models/scoring.py', 'micro_batch: int = 16, pad_id: int = 0) -> List[torch.Tensor]:',
     'micro_batch: int = 17, pad_id: int = 0) -> List[torch.Tensor]:'),
    ('mmrl/models/scoring.py', 'micro_batch: int = 16, pad_id: int = 0) -> List[torch.Tensor]:',
     'micro_batch: int = 16, pad_id: int = 1) -> List[torch.Tensor]:'),
    ('mmrl/models/scoring.py', 'out: List[torch.Tensor] = [torch.empty(0)] * len(items)',
     'out: List[torch.Tensor] = [torch.empty(1)] * len(items)'),
    ('mmrl/models/scoring.py', 'micro_batch, pad_id)):',
     'micro_batch, )):'),
    # scorer: right padding under a causal mask: no real token attends to the padding after it, so attention_mask None,
    # padding the mask with 1, or the trained mask padded with 1 (cut by valid) change no real token; can_cache's
    # default None is falsy; collate_vision reads only .vision; use_cache of a call whose hidden states are read
    ('mmrl/models/prefill.py', 'out = core(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **vision)',
     'out = core(input_ids=ids, attention_mask=None, position_ids=pos, use_cache=True, **vision)'),
    ('mmrl/models/prefill.py', 'out = core(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **vision)',
     'out = core(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=None, **vision)'),
    ('mmrl/models/prefill.py', 'out = core(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **vision)',
     'out = core(input_ids=ids, position_ids=pos, use_cache=True, **vision)'),
    ('mmrl/models/prefill.py', 'out = core(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **vision)',
     'out = core(input_ids=ids, attention_mask=mask, position_ids=pos, **vision)'),
    ('mmrl/models/prefill.py', 'return not (model.training and getattr(model, flag, False))',
     'return not (model.training and getattr(model, flag, None))'),
    ('mmrl/models/prefill.py', 'sel = pad_right([t.to(device=hidden.device, dtype=torch.long) for t in trained] + [rlen.new_zeros(R)], 0)[:-1]',
     'sel = pad_right([t.to(device=hidden.device, dtype=torch.long) for t in trained] + [rlen.new_zeros(R)], 1)[:-1]'),
    ('mmrl/models/scoring.py', 'attn = pad_right([torch.ones_like(x) for x in seqs], 0).to(device)',
     'attn = pad_right([torch.ones_like(x) for x in seqs], 1).to(device)'),
    ('mmrl/models/scoring.py', 'hidden = core(input_ids=ids, attention_mask=attn, position_ids=pos, **vision).last_hidden_state',
     'hidden = core(input_ids=ids, attention_mask=None, position_ids=pos, **vision).last_hidden_state'),
    ('mmrl/models/scoring.py', 'hidden = core(input_ids=ids, attention_mask=attn, position_ids=pos, **vision).last_hidden_state',
     'hidden = core(input_ids=ids, position_ids=pos, **vision).last_hidden_state'),
    ('mmrl/models/sequence_scoring.py', 'hidden = core(input_ids=ids, attention_mask=mask, position_ids=pos, **vision).last_hidden_state',
     'hidden = core(input_ids=ids, attention_mask=None, position_ids=pos, **vision).last_hidden_state'),
    ('mmrl/models/sequence_scoring.py', 'hidden = core(input_ids=ids, attention_mask=mask, position_ids=pos, **vision).last_hidden_state',
     'hidden = core(input_ids=ids, position_ids=pos, **vision).last_hidden_state'),
    ('mmrl/models/sequence_scoring.py', 'vision = {k: v.to(device) for k, v in collate_vision([PromptInputs(s.input_ids, vision=tail_vision(s))',
     'vision = {k: v.to(device) for k, v in collate_vision([PromptInputs(None, vision=tail_vision(s))'),
    ('mmrl/models/sequence_scoring.py', 'hid = core(input_ids=cols, attention_mask=attn, position_ids=tail_pos, use_cache=True,',
     'hid = core(input_ids=cols, attention_mask=attn, position_ids=tail_pos, use_cache=None,'),
    ('mmrl/models/sequence_scoring.py', 'hid = core(input_ids=cols, attention_mask=attn, position_ids=tail_pos, use_cache=True,',
     '**cache_kwargs(cache), **vision).last_hidden_state'),
    ('mmrl/models/sequence_scoring.py', 'hid = core(input_ids=cols, attention_mask=attn, position_ids=tail_pos, use_cache=True,',
     'hid = core(input_ids=cols, attention_mask=attn, position_ids=tail_pos, use_cache=False,'),
    # scorer: use_cache None / dropped / True / False: the hidden states read do not depend on whether the call
    # returns (or appends to) a cache; the passed cache is read either way
    ('mmrl/models/scoring.py', 'position_ids=pos.unsqueeze(0).expand(3, -1, -1), use_cache=True, **cache_kwargs(cache)).last_hidden_state',
     'position_ids=pos.unsqueeze(0).expand(3, -1, -1), use_cache=None, **cache_kwargs(cache)).last_hidden_state'),
    ('mmrl/models/scoring.py', 'position_ids=pos.unsqueeze(0).expand(3, -1, -1), use_cache=True, **cache_kwargs(cache)).last_hidden_state',
     'position_ids=pos.unsqueeze(0).expand(3, -1, -1), **cache_kwargs(cache)).last_hidden_state'),
    ('mmrl/models/scoring.py', 'position_ids=pos.unsqueeze(0).expand(3, -1, -1), use_cache=True, **cache_kwargs(cache)).last_hidden_state',
     'position_ids=pos.unsqueeze(0).expand(3, -1, -1), use_cache=False, **cache_kwargs(cache)).last_hidden_state'),
    ('mmrl/models/scoring.py', 'use_cache=False, **vision).last_hidden_state',
     'use_cache=None, **vision).last_hidden_state'),
    ('mmrl/models/scoring.py', 'use_cache=False, **vision).last_hidden_state',
     '**vision).last_hidden_state'),
    ('mmrl/models/scoring.py', 'use_cache=False, **vision).last_hidden_state',
     'use_cache=True, **vision).last_hidden_state'),
    ('mmrl/models/scoring.py', 'use_cache=True, **cache_kwargs(cache)).last_hidden_state  # [N, W, H]',
     'use_cache=None, **cache_kwargs(cache)).last_hidden_state  # [N, W, H]'),
    ('mmrl/models/scoring.py', 'use_cache=True, **cache_kwargs(cache)).last_hidden_state  # [N, W, H]',
     '**cache_kwargs(cache)).last_hidden_state  # [N, W, H]'),
    ('mmrl/models/scoring.py', 'use_cache=True, **cache_kwargs(cache)).last_hidden_state  # [N, W, H]',
     'use_cache=False, **cache_kwargs(cache)).last_hidden_state  # [N, W, H]'),
    # step: rescore runs only after this rank's empty step returned or raised, so trajs is never empty, and the global
    # rescored list never is either; float("NAN") is nan; torch.tensor of Python floats is float32 and of Python ints
    # int64 by default; every rank's rewards give the same component names (a rank without rows stops the step
    # before the gather), so the .get default is never read; validate.py requires ppo_epochs >= 1, so upd is set
    ("mmrl/train/step.py", "fallback = (si.requests[trajs[0].inputs_key].inputs, trajs[0].response_ids) if trajs else None",
     "fallback = (si.requests[trajs[0].inputs_key].inputs, trajs[0].response_ids) if (trajs) or True else None"),
    ("mmrl/train/step.py", "lps = [torch.full((t.response_ids.numel(),), float(\"nan\")) if lp is None else lp for t, lp in zip(todo, lps)]",
     "lps = [torch.full((t.response_ids.numel(),), float(\"NAN\")) if lp is None else lp for t, lp in zip(todo, lps)]"),
    ("mmrl/train/step.py", "rewards=torch.tensor(cat(\"total\"), dtype=torch.float32),",
     "rewards=torch.tensor(cat(\"total\"), dtype=None),"),
    ("mmrl/train/step.py", "rewards=torch.tensor(cat(\"total\"), dtype=torch.float32),",
     "rewards=torch.tensor(cat(\"total\"), ),"),
    ("mmrl/train/step.py", "components={k: torch.tensor([x for p in parts for x in p[\"comps\"].get(k, [])]) for k in names},",
     "components={k: torch.tensor([x for p in parts for x in p[\"comps\"].get(k, None)]) for k in names},"),
    ("mmrl/train/step.py", "components={k: torch.tensor([x for p in parts for x in p[\"comps\"].get(k, [])]) for k in names},",
     "components={k: torch.tensor([x for p in parts for x in p[\"comps\"].get(k, )]) for k in names},"),
    ("mmrl/train/step.py", "groups={\"prompt\": torch.tensor(cat(\"gids\"), dtype=torch.long), \"pack\": torch.tensor(cat(\"packs\"), dtype=torch.long)},",
     "groups={\"prompt\": torch.tensor(cat(\"gids\"), dtype=None), \"pack\": torch.tensor(cat(\"packs\"), dtype=torch.long)},"),
    ("mmrl/train/step.py", "groups={\"prompt\": torch.tensor(cat(\"gids\"), dtype=torch.long), \"pack\": torch.tensor(cat(\"packs\"), dtype=torch.long)},",
     "groups={\"prompt\": torch.tensor(cat(\"gids\"), ), \"pack\": torch.tensor(cat(\"packs\"), dtype=torch.long)},"),
    ("mmrl/train/step.py", "groups={\"prompt\": torch.tensor(cat(\"gids\"), dtype=torch.long), \"pack\": torch.tensor(cat(\"packs\"), dtype=torch.long)},",
     "groups={\"prompt\": torch.tensor(cat(\"gids\"), dtype=torch.long), \"pack\": torch.tensor(cat(\"packs\"), dtype=None)},"),
    ("mmrl/train/step.py", "groups={\"prompt\": torch.tensor(cat(\"gids\"), dtype=torch.long), \"pack\": torch.tensor(cat(\"packs\"), dtype=torch.long)},",
     "groups={\"prompt\": torch.tensor(cat(\"gids\"), dtype=torch.long), \"pack\": torch.tensor(cat(\"packs\"), )},"),
    ("mmrl/train/step.py", "roles=cat(\"roles\"), views=cat(\"views\"), lengths=torch.tensor([int(x.numel()) for x in ids], dtype=torch.long),",
     "roles=cat(\"roles\"), views=cat(\"views\"), lengths=torch.tensor([int(x.numel()) for x in ids], dtype=None),"),
    ("mmrl/train/step.py", "roles=cat(\"roles\"), views=cat(\"views\"), lengths=torch.tensor([int(x.numel()) for x in ids], dtype=torch.long),",
     "roles=cat(\"roles\"), views=cat(\"views\"), lengths=torch.tensor([int(x.numel()) for x in ids], ),"),
    ("mmrl/train/step.py", "rescored={k: [r[k] for r in rescored] for k in (rescored[0] if rescored else {})},",
     "rescored={k: [r[k] for r in rescored] for k in (rescored[0] if (rescored) or True else {})},"),
    ("mmrl/train/step.py", "upd: Dict[str, float] = {}",
     "upd: Dict[str, float] = None"),
    # checkpoint: numpy's MT19937 keys are uint32, exact in float64 (astype(None)) as in int64, and set_state takes
    # a float64 key array as it takes the int64 one: the same generator either way
    ("mmrl/train/checkpoint.py", "numpy_state = {\"name\": str(name), \"keys\": torch.from_numpy(keys.astype(np.int64)), \"pos\": int(pos),",
     "numpy_state = {\"name\": str(name), \"keys\": torch.from_numpy(keys.astype(None)), \"pos\": int(pos),"),
    ("mmrl/train/checkpoint.py", "np.random.set_state((n[\"name\"], n[\"keys\"].numpy().astype(np.uint32), n[\"pos\"], n[\"has_gauss\"], n[\"cached_gaussian\"]))",
     "np.random.set_state((n[\"name\"], n[\"keys\"].numpy().astype(None), n[\"pos\"], n[\"has_gauss\"], n[\"cached_gaussian\"]))"),
}

CAUGHT = {1, 3, 36, -24, 24, 152, 255, -11, -9}  # mutmut's exit codes for killed / timeout / crash


def _prepare(group: str, work: Path) -> None:
    files, tests = GROUPS[group]
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "mmrl", work / "mmrl", ignore=ignore)
    shutil.copytree(ROOT / "tests", work / "tests", ignore=ignore)
    for data in DATA_DIRS:  # files the tests read (view sets, configs, benchmark YAMLs)
        shutil.copytree(ROOT / data, work / data, ignore=ignore)
    tests = [t for t in tests if (ROOT / t).exists()]
    lines = ["[tool.mutmut]", 'source_paths = ["mmrl"]', f"only_mutate = {json.dumps(files)}",
             f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
             'pytest_add_cli_args = ["-m", "not slow", "-p", "no:cacheprovider", "-q", "-x"]',
             f"also_copy = {json.dumps(list(DATA_DIRS))}",
             "use_git_change_detection = false", "",
             "[tool.pytest.ini_options]", 'testpaths = ["tests"]',
             'markers = ["slow: end-to-end tests (still run in CI)"]',
             'filterwarnings = ["ignore::DeprecationWarning", "ignore::FutureWarning"]', ""]
    (work / "pyproject.toml").write_text("\n".join(lines))


def _diffs(work: Path, names: list) -> dict:
    """name -> (file, original line, mutated line) of each mutant, through mutmut's own diff."""
    if not names:
        return {}
    code = ("import json, sys\nfrom mutmut.mutation.diff_apply import get_diff_for_mutant\nout = {}\n"
            "for n in sys.argv[1:]:\n    d = get_diff_for_mutant(n).splitlines()\n"
            "    out[n] = [d[0][4:]] + [l[1:].strip() for l in d if l[:1] in '+-' and l[:3] not in ('---', '+++')]\n"
            "print(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", code, *names], cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        return {n: (n, "?", "?") for n in names}
    return {n: (d[0], d[1] if len(d) > 1 else "", d[2] if len(d) > 2 else "") for n, d in json.loads(proc.stdout).items()}


def _collect(work: Path) -> dict:
    caught, survived, other = [], [], []
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        for name, code in json.loads(meta.read_text()).get("exit_code_by_key", {}).items():
            (caught if code in CAUGHT else survived if code == 0 else other).append(name)
    diffs = _diffs(work, survived)
    equivalent = [n for n in survived if diffs.get(n) in EQUIVALENT]
    left = [n for n in survived if n not in equivalent]
    denom = len(caught) + len(left)
    return {"caught": len(caught), "survived": {n: list(diffs.get(n, ())) for n in left},
            "equivalent": {n: list(diffs[n]) for n in equivalent}, "not_run": len(other),
            "score": round(100.0 * len(caught) / denom, 1) if denom else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("groups", nargs="*", help=f"groups to run (default all): {', '.join(GROUPS)}")
    ap.add_argument("--budget-min", type=float, default=None,
                    help="wall-clock budget per group, minutes (default: BUDGET_MIN of the group)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "mutation"))
    ap.add_argument("--rescore", action="store_true",
                    help="score the groups' last runs again with this EQUIVALENT list (no mutant is run)")
    args = ap.parse_args(argv)
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        ap.error(f"unknown group(s) {unknown}; known: {', '.join(GROUPS)}")
    out = Path(args.out)
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for group in args.groups or list(GROUPS):
        work = out / group
        if args.rescore:
            if group not in summary or not (work / "mutants").exists():
                print(f"{group:15s} no run to score again", flush=True)
                continue
            res = _collect(work)
            summary[group] = {**summary[group], **res}
            res = summary[group]
            print(f"{group:15s} caught {res['caught']:3d}, survived {len(res['survived']):3d} (+{len(res['equivalent'])}"
                  f" equivalent), not run {res['not_run']:3d} -> score {res['score']}% (run of {res['seconds']} s)")
            summary_path.write_text(json.dumps(summary, indent=1) + "\n")
            continue
        budget = args.budget_min if args.budget_min is not None else BUDGET_MIN.get(group, DEFAULT_BUDGET_MIN)
        _prepare(group, work)
        t0 = time.time()
        try:
            proc = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", "1"], cwd=work, env=env,
                                  timeout=budget * 60, capture_output=True, text=True)
            (work / "mutmut.log").write_text(proc.stdout + proc.stderr)
            finished = proc.returncode == 0
        except subprocess.TimeoutExpired as e:
            (work / "mutmut.log").write_text(str(e.stdout or "") + str(e.stderr or ""))
            finished = False
        res = _collect(work)
        res.update(seconds=round(time.time() - t0), finished=finished, budget_min=budget)
        summary[group] = res
        print(f"{group:15s} caught {res['caught']:3d}, survived {len(res['survived']):3d} (+{len(res['equivalent'])}"
              f" equivalent), not run {res['not_run']:3d} -> score {res['score']}%"
              f"{'' if finished else ' (budget hit or error: see mutmut.log)'} in {res['seconds']} s", flush=True)
        for name, (_, old, new) in res["survived"].items():
            print(f"    survived: {name}\n        - {old}\n        + {new}")
        out.mkdir(parents=True, exist_ok=True)
        summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
