"""Agentic VHOP search through the real tool loop: (a) ``visual_retrieve`` on the single-step retriever, top-k per
call, against (b) ``visual_retrieve`` on the VHOP-Router, one call returns a chain.

Everything but the agent's words is the real machinery: the ``multi_turn`` loop (``mmrl.rollout.agent_loop_tools``)
with a suite loaded by ``mmrl.tools.load_suite`` (``retriever: single_step`` on the SFT router's embedder, or
``retriever: router`` on a router stage folder), the tool call parser and budgets, the returned images rendered as
``<tool_response>`` turns by the tiny Qwen2.5-VL's processor (so tokens and in-context images are counted as the
model would see them). The agent's turns are written by ``ReaderEngine``: a random tiny model neither calls tools
nor reads emblems, so a scripted *ideal reader* stands in for it. It sees only what the tools returned: it parses
the query (its start image: main object and scene, from the query's meta), finds that image among the returned ids
(reading an image = its meta), follows its emblem to the next wanted image while the returned images hold it, and
calls ``visual_retrieve`` again with an exact description of the wanted image when they do not. It answers the
main object of the first image without an emblem (the chain's end). Both arms use the same reader; only the
retrieval tool differs. Task success = the answer equals the query's target (``meta.answer``).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List

import torch

from mmrl.data.schema import Media, Trajectory
from mmrl.data.synth_vhop import exact_query
from mmrl.data.vhop_format import query_samples
from mmrl.media.inputs import build_prompt_inputs
from mmrl.rollout.agent_loop_tools import tool_loop
from mmrl.rollout.base import RolloutEngine, RolloutRequest, SamplingParams
from mmrl.tools import load_suite

RESPONSE = re.compile(r"<tool_response>\n\d+ images \([^)]*\): (.*?)\.\n</tool_response>", re.S)
HIT = re.compile(r"(\S+) \((-?[\d.]+)\)")


def _key(meta_main, meta_scene):
    return (meta_main["colour"], meta_main["shape"], meta_scene["colour"], meta_scene["ground"])


class ReaderEngine(RolloutEngine):
    """Writes each agent turn from the episode's text so far (see the module docstring)."""

    supports_sequences = True

    def __init__(self, tokenizer, corpus_meta: Dict[str, dict], k: int):
        self.tok, self.meta, self.k = tokenizer, corpus_meta, k
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def decide(self, sample, text: str) -> str:
        start = sample.meta["vhop_start"]
        wanted = _key(start["main"], start["scene"])
        seen = {}  # key -> id of every image returned so far
        for block in RESPONSE.findall(text):
            for iid, _ in HIT.findall(block):
                m = self.meta.get(iid)
                if m is not None:
                    seen[_key(m["main"], m["scene"])] = iid
        for _ in range(16):  # follow the emblems through the images in context
            if wanted not in seen:
                break
            m = self.meta[seen[wanted]]
            if not m.get("emblem"):
                return f"{m['main']['colour']} {m['main']['shape']}"
            wanted = _key(m["emblem"], m["scene"])
        q = exact_query((wanted[0], wanted[1]), (wanted[2], wanted[3]))
        if text.count("<tool_response>") >= sample.meta["max_calls"] or json.dumps(q) in text:
            return "unknown"  # out of calls, or this search was already made and did not show the wanted image
        return ('<tool_call>{"name": "visual_retrieve", "arguments": ' + json.dumps({"query": q, "k": self.k})
                + "}</tool_call>")

    def generate(self, requests: List[RolloutRequest], params: SamplingParams) -> List[Trajectory]:
        out = []
        for k, r in enumerate(requests):
            text = self.tok.decode(r.inputs.input_ids)
            ids = torch.tensor(self.tok(self.decide(r.sample, text))["input_ids"] + [self.end])
            for j in range(r.n):
                out.append(Trajectory(r.sample_id, r.group_id, r.view, r.role, r.inputs.input_ids, ids.clone(),
                                      torch.zeros(ids.numel()), torch.ones(ids.numel(), dtype=torch.bool),
                                      self.tok.decode(ids, skip_special_tokens=True), inputs_key=k, pack_id=j))
        return out


def write_suite(out: Path, name: str, model: str, k: int, max_calls: int) -> str:
    """A retrieval suite for one arm (tools/retrieval.yaml's keys; budgets sized for chains of up to 5 hops)."""
    text = (f"description: VHOP agentic search, {name}\nmax_turns: {max_calls + 1}\nmax_total_tokens: 16384\n"
            f"budget: {{max_calls: {max_calls}, max_images: {k}, max_media_tokens: 100000, "
            f"frame_max_pixels: 12544, frame_min_pixels: 784, max_call_chars: 1024}}\n"
            f"retriever: {{name: {name}, model: {model}}}\ntools:\n  - name: visual_retrieve\n")
    path = out / f"suite_{name}.yaml"
    path.write_text(text)
    return str(path)


def run_agent(queries_file: str, suite_file: str, processor, k: int, max_calls: int) -> Dict[str, float]:
    """Episodes of every query through the real loop; per-task means of success, tokens, images and calls."""
    from mmrl.data.vhop_format import load_corpus, load_queries

    samples, _ = query_samples(queries_file)
    qs = {q.id: q for q in load_queries(queries_file)[0]}
    corpus = load_corpus(samples[0].meta["corpus"])
    meta = {it.id: it.meta for it in corpus.items}
    suite = load_suite(suite_file)
    loop, engine = tool_loop(processor, suite), ReaderEngine(processor.tokenizer, meta, k)
    rows = []
    for s in samples:
        s.meta.update(vhop_start=qs[s.id].meta["start"], max_calls=max_calls)
        msgs = [{"role": "user", "content": [{"type": "text", "text": s.question}]}]
        req = RolloutRequest(inputs=build_prompt_inputs(processor, msgs, Media(sample_id=s.id), sample_id=s.id), n=1,
                             sample_id=s.id, sample=s)
        (t,) = loop.run(engine, [req], SamplingParams(max_new_tokens=256, greedy=True))
        calls = [turn for turn in t.turns if "tool" in turn]
        images = sum(len(turn.get("retrieved", [])) for turn in calls)
        rows.append({"level": qs[s.id].level, "success": float(t.text.strip() == s.answer),
                     "tokens": float(t.prompt_ids.numel() + t.response_ids.numel()), "images": float(images),
                     "calls": float(len(calls))})
    mean = lambda key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    return {key: mean(key) for key in ("success", "tokens", "images", "calls")}
