"""A reward for the 2-rank colocated vLLM test that also records what each rank drew: the share of even token ids
(``ds_rewards.even_tokens``: varies with the tokens, so the weights move), and one JSON line per response in
``$MMRL_TEST_DRAWS/rank<RANK>.jsonl`` (sample, group, token ids), so the test can see both ranks' rollouts."""
from __future__ import annotations

import json
import os
from pathlib import Path


def logged_even_tokens(ctx):
    out = Path(os.environ["MMRL_TEST_DRAWS"]) / f"rank{os.environ.get('RANK', '0')}.jsonl"
    with out.open("a") as f:
        for c in ctx:
            t = c.trajectory
            f.write(json.dumps({"sample": str(t.sample_id), "group": int(t.group_id),
                                "ids": [int(x) for x in t.response_ids]}) + "\n")
    return [float((c.trajectory.response_ids % 2 == 0).float().mean()) for c in ctx]
