"""What a step logs besides its scalars, for TensorBoard and W&B (``MetricsLogger.log_details``): sample
completions as a table, histograms, and a contact sheet of one sample's views.

``step_details`` reads the step's global batch (every rank's rows: ``gather_batch``) and this rank's trajectories
(rows ``lo..lo+len(trajs)`` of the batch). Histograms: ``reward`` (the weighted total of the reward components per response), ``advantage``
(per response, or per real token when the algorithm gives token-level advantages) and ``response_len`` (tokens
per response), every step. The completions table (``COMPLETIONS`` responses of the rank, spread over its
prompts and views: sample, view, role, question, response, reward, advantage, expected answer) and the contact sheet (``mmrl.views.preview``: the
first sample's views, one row each) come on the steps the caller asks for (``train.log_samples_every``).
"""
from __future__ import annotations

from typing import Any, Dict, List

import torch

COMPLETIONS = 8  # rows of the completions table
TEXT_CHARS = 300  # a question or response longer than this is cut (TensorBoard renders each cell on one line)
SHEET_FRAMES = 8  # frames per view in the contact sheet


def per_response(adv: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """A response's advantage: the value itself, or the mean over its real tokens for ``[N, T]`` advantages."""
    if adv.dim() == 1:
        return adv.float()
    valid = (torch.arange(adv.shape[1])[None, :] < lengths[:, None]).float()
    return (adv.float() * valid).sum(1) / valid.sum(1).clamp(min=1.0)


def spread(trajs, k: int) -> List[int]:
    """Indices of ``k`` trajectories, the first response of each (sample, view) before any second one (in batch
    order), so that a table of a few rows shows several prompts and views rather than one group's responses."""
    seen: Dict[tuple, int] = {}
    rank = []
    for i, t in enumerate(trajs):
        key = (t.sample_id, t.view)
        rank.append((seen.get(key, 0), i))
        seen[key] = seen.get(key, 0) + 1
    return [i for _, i in sorted(rank)[:k]]


def step_details(si, trajs, batch, adv: torch.Tensor, lo: int, samples_too: bool) -> Dict[str, Any]:
    """``{"histograms": {name: 1-D tensor}, "completions": [row dict], "contact_sheet": PIL image or None}``
    (the last two only with ``samples_too``)."""
    adv = adv.detach().float().cpu()
    if adv.dim() == 2:
        valid = torch.arange(adv.shape[1])[None, :] < batch.lengths[:, None]
        adv_values = adv[valid]
    else:
        adv_values = adv
    out: Dict[str, Any] = {"histograms": {"reward": batch.rewards.float(), "advantage": adv_values,
                                          "response_len": batch.lengths.float()}}
    if not samples_too:
        return out
    resp_adv = per_response(adv, batch.lengths)
    rows: List[Dict[str, Any]] = []
    for i in spread(trajs, COMPLETIONS):
        t = trajs[i]
        sample = si.samples[t.sample_id]
        rows.append({"sample": t.sample_id, "view": t.view, "role": t.role,
                     "prompt": sample.question[:TEXT_CHARS], "response": t.text[:TEXT_CHARS],
                     "reward": round(float(batch.rewards[lo + i]), 4), "advantage": round(float(resp_adv[lo + i]), 4),
                     "expected": t.expected})
    out["completions"] = rows
    out["contact_sheet"] = None
    if trajs:
        from mmrl.views.preview import make_contact_sheet

        sid = trajs[0].sample_id
        views = [v for (s, _), v in si.views.items() if s == sid]
        if views:
            out["contact_sheet"] = make_contact_sheet(views, si.samples[sid], None, cell=64, max_frames=SHEET_FRAMES,
                                                      candidates=si.candidates.get((sid, views[0].name)))
    return out


def completions_markdown(rows: List[Dict[str, Any]]) -> str:
    """The completions as a markdown table (TensorBoard's text plugin renders it); ``|`` and line breaks escaped."""
    if not rows:
        return "(no completions this step)"
    cols = list(rows[0])
    cell = lambda v: " ".join(str(v).split()).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)
