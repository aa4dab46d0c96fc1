"""The command line of ``bench/bpo_vs_grpo.py``: its parser, the settings a seed record keeps, and the seeds a
recorded command names (read by the pooled table, ``bpo_pool.py``, and the recovery, ``bpo_recover.py``)."""
from __future__ import annotations

import argparse
import shlex
from typing import Dict, List, Tuple

from bpo_arms import ARMS

SETTINGS = ("n_train", "n_test", "sft_steps", "rl_steps", "prompts_per_step", "sft_null_share", "prior", "prior_strength")


def build_parser(description: str = "") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS), help="built-in arms to run")
    ap.add_argument("--sft-steps", type=int, default=None, help="default: configs/demo.yaml's sft.steps")
    ap.add_argument("--rl-steps", type=int, default=None, help="default: configs/demo.yaml's train.steps")
    ap.add_argument("--n-train", type=int, default=None, help="default: the demo's world (mmrl.demo.N_TRAIN)")
    ap.add_argument("--n-test", type=int, default=None, help="default: mmrl.demo.N_TEST")
    ap.add_argument("--prompts-per-step", type=int, default=None, help="default: configs/demo.yaml's")
    ap.add_argument("--sft-null-share", type=float, default=0.05,
                    help="empty-scene items answered with the abstention option, as a share of the SFT data")
    ap.add_argument("--prior", choices=["frequent", "phrasing", "tint"], default=None,
                    help="a world with a prior to unlearn (train biased, held-out split debiased)")
    ap.add_argument("--prior-strength", type=float, default=0.8)
    ap.add_argument("--cost-tokens", type=int, default=256, help="response length of the step-ratio check (0: skip)")
    ap.add_argument("--cost-steps", type=int, default=3)
    ap.add_argument("--cost-prompts", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=1,
                    help="seeds run at once, each in its own process (one torch thread each: 2 fit the 2-core box)")
    ap.add_argument("--arm", action="append", default=[], metavar="'NAME ITEM ...'",
                    help="an extra arm, one quoted string: NAME, then config files (over configs/demo.yaml) and dotted "
                         "overrides k=v, e.g. --arm 'bpo_paired configs/bpo_demo.yaml algorithm.params.anchor_mode=paired' "
                         "(repeatable)")
    ap.add_argument("--out", default="runs/bpo_vs_grpo")
    ap.add_argument("--report", default=None, help="also write the markdown table here")
    ap.add_argument("--render-only", action="store_true",
                    help="no training: print the table again from OUT/seed<S>/seed_result.json of an earlier run")
    ap.add_argument("--seed-dir", default=None,
                    help="also write each seed's results as DIR/seed<S>.json (with its command and settings), to commit")
    ap.add_argument("--pool", nargs="+", default=None, metavar="DIR",
                    help="no training: render the table from the seed<S>.json files in DIR(s) (bench/bpo_pool.py)")
    ap.add_argument("overrides", nargs="*", help="dotted config overrides applied to SFT and every arm")
    return ap


def command_seeds(command: str) -> Tuple[List[int], Dict]:
    """The seeds a bench command names and its settings, read by the bench's own parser."""
    argv = shlex.split(command)
    argv = argv[next(i for i, a in enumerate(argv) if a.endswith("bpo_vs_grpo.py")) + 1:]
    args = build_parser().parse_args(argv)
    return list(args.seeds), {k: getattr(args, k) for k in SETTINGS}
