"""Supervised multi-turn tool episodes: scripts of model turns (``teacher.jsonl`` of the seek world, or the set
``mmrl rectify`` writes) replayed through the real tool loop (``mmrl.rollout.agent_loop_tools``) so that each
tool response carries the frames the tool really returns, then trained on with teacher forcing.

A script file holds one JSON object per line: ``{"id": <sample id>, "turns": [<model turn text>, ...]}``. The
replay engine writes turn ``k`` of an episode as its script's ``k``-th text plus ``<|im_end|>``; the loop runs
every call on the episode's own sample and inserts the result, exactly as in RL. The SFT loss is the mean
negative log-likelihood of the model's tokens only (``Trajectory.loss_mask``: tool responses are masked), over
the whole interleaved sequence (``mmrl.models.sequence_scoring``). A script whose replay differs from what it
says (a call the tools refuse, an episode cut by the suite's budgets) is an error naming the sample and line.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Dict, List, Tuple

import torch

from mmrl.data.schema import Sample, Trajectory
from mmrl.errors import ConfigError, DataError
from mmrl.rollout.base import RolloutEngine, RolloutRequest, SamplingParams
from mmrl.tools.calls import CALL_RE


def read_scripts(path: str) -> List[dict]:
    """The records of a script file, each checked: ``id`` a string, ``turns`` a non-empty list of strings."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config key 'sft.turns': file not found: {path}")
    out = []
    for i, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{i}: not JSON ({e.msg})") from None
        turns = rec.get("turns") if isinstance(rec, dict) else None
        if not isinstance(rec, dict) or not isinstance(rec.get("id"), str) or not isinstance(turns, list) \
                or not turns or not all(isinstance(t, str) for t in turns):
            raise DataError(f"{path}:{i}: a script is {{\"id\": <sample id>, \"turns\": [<text>, ...]}}")
        out.append({**rec, "line": i})
    if not out:
        raise DataError(f"{path}: no scripts")
    return out


class ReplayEngine(RolloutEngine):
    """Writes each episode's next scripted turn (``request.meta["script"]``, consumed in order) as its tokens plus
    ``<|im_end|>``; log-probs are zeros (teacher forcing scores them later)."""

    supports_sequences = True

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def generate(self, requests: List[RolloutRequest], params: SamplingParams) -> List[Trajectory]:
        out = []
        for k, r in enumerate(requests):
            if r.n != 1:
                raise ValueError("ReplayEngine: one episode per request (each has its own script)")
            script = r.meta["script"]
            text = script.pop(0) if script else ""
            ids = torch.tensor(self.tok.encode(text, add_special_tokens=False) + [self.im_end], dtype=torch.long)
            out.append(Trajectory(r.sample_id, r.group_id, r.view, r.role, r.inputs.input_ids, ids,
                                  torch.zeros(ids.numel()), torch.ones(ids.numel(), dtype=torch.bool), text,
                                  inputs_key=k, pack_id=0))
        return out


def replay(processor, suite, requests: List[RolloutRequest], scripts: List[List[str]]) -> List[Trajectory]:
    """Tool episodes whose model turns are ``scripts`` (one per request), run by the suite's loop."""
    from mmrl.rollout.agent_loop_tools import tool_loop

    reqs = []
    for r, script in zip(requests, scripts):
        # a copy of the inputs per episode: the loop merges episodes that continue the same inputs object
        reqs.append(RolloutRequest(inputs=copy.copy(r.inputs), n=1, sample_id=r.sample_id, group_id=len(reqs),
                                   view=r.view, role=r.role, expected=r.expected, sample=r.sample,
                                   meta={"script": list(script)}))
    # the per-turn budget the loop checks against max_total_tokens: the longest scripted turn (with <|im_end|>)
    longest = max(len(processor.tokenizer.encode(t, add_special_tokens=False)) + 1 for s in scripts for t in s)
    return tool_loop(processor, suite).run(ReplayEngine(processor.tokenizer), reqs,
                                           SamplingParams(max_new_tokens=longest))


def check_replay(traj: Trajectory, script: List[str], where: str) -> None:
    """The replay must be the script: every call valid, every turn written, the last turn the answer."""
    model_turns = [t for t in traj.turns if t.get("turn", -1) >= 0]
    bad = [t for t in model_turns if "tool" in t and not t["valid"]]
    if bad:
        raise DataError(f"{where}: the tools refuse call {bad[0]['turn']} of the script "
                        f"({bad[0].get('reason')}: {bad[0].get('error', '')[:120]})")
    # the script's last turn answers: the environment ends the episode ("done"), or the suite's max_turns-th turn
    # does (the environment is not asked then, so the answer must hold no call)
    end = traj.turns[-1].get("end")
    answered = end == "done" or (end == "max_turns" and not CALL_RE.search(script[-1]))
    if len(model_turns) != len(script) or not answered:
        raise DataError(f"{where}: the suite ends the episode after {len(model_turns)} of the script's "
                        f"{len(script)} turns ({traj.turns[-1].get('end')}); raise max_turns / the budgets or "
                        f"shorten the script")


class TurnItems:
    """SFT items ``(sequence inputs, response ids, loss mask)`` of the scripts in ``path`` for ``samples``
    (records of unknown samples: a ``DataError`` naming them). A sample with several scripts gives script
    ``epoch % count`` in each epoch, so a run and its resume see the same items."""

    def __init__(self, path: str, suite_path: str, samples: List[Sample]):
        from mmrl.tools.suite import load_suite

        if not suite_path:
            raise ConfigError("config key 'sft.turns' needs rollout.tools (the suite the scripts' calls run in)")
        self.path, self.suite = path, load_suite(suite_path)
        known = {s.id for s in samples}
        self.by_id: Dict[str, List[dict]] = {}
        for rec in read_scripts(path):
            if rec["id"] not in known:
                raise DataError(f"{path}:{rec['line']}: sample {rec['id']!r} is not in data.train")
            self.by_id.setdefault(rec["id"], []).append(rec)
        self.cache: Dict[Tuple[str, int], tuple] = {}

    def samples(self, samples: List[Sample]) -> List[Sample]:
        return [s for s in samples if s.id in self.by_id]

    def item(self, sample: Sample, request: RolloutRequest, processor, epoch: int) -> tuple:
        recs = self.by_id[sample.id]
        k = epoch % len(recs)
        if (sample.id, k) not in self.cache:
            rec = recs[k]
            (traj,) = replay(processor, self.suite, [request], [rec["turns"]])
            check_replay(traj, rec["turns"], f"{self.path}:{rec['line']} (sample {sample.id})")
            self.cache[(sample.id, k)] = (traj.sequence, traj.response_ids, traj.loss_mask)
        return self.cache[(sample.id, k)]
