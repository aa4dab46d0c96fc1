"""A picture of one tool episode: the prompt's frames, then one row per model turn that returned media (the call,
its arguments and the frames or crop it returned), drawn by the view-set contact sheet (``mmrl.views.preview``)."""
from __future__ import annotations

import json
from typing import Optional

from PIL import Image

from mmrl.data.schema import Media, Sample, Trajectory, View
from mmrl.views import make_contact_sheet


def episode_sheet(traj: Trajectory, sample: Sample, prompt_media: Media, out_png, cell: int = 96,
                  max_frames: int = 16) -> Image.Image:
    """Write the PNG of ``traj`` (a multi-turn trajectory) and return it. Row labels: the turn, the tool, whether
    the call was valid, and its arguments; rows of calls that returned nothing are left out (their turns are in
    ``traj.turns``)."""
    rows = [View(name=f"prompt ({traj.view})", role=traj.role, media=prompt_media, expected=traj.expected,
                 transform="shown first")]
    env_segments = [s for s in traj.segments if not s.trained]
    calls = [t for t in traj.turns if t.get("turn", -1) >= 0 and "observation" in t]
    for turn, seg in zip(calls, env_segments):
        if seg.media is None:
            continue
        name = turn.get("tool", "observation")
        args = json.dumps(turn.get("arguments"), separators=(",", ":")) if "arguments" in turn else seg.text[:30]
        rows.append(View(name=f"turn {turn['turn']}: {name}", role="tool" if "tool" in turn else "env",
                         media=seg.media, expected=None, transform=args))
    return make_contact_sheet(rows, sample, out_png, cell=cell, max_frames=max_frames)


def first_turn_with_media(traj: Trajectory) -> Optional[int]:
    """Index of the first model turn whose answer carried media (``None`` if none did): where a preview is useful."""
    for turn, seg in zip([t for t in traj.turns if "observation" in t], [s for s in traj.segments if not s.trained]):
        if seg.media is not None:
            return int(turn["turn"])
    return None
