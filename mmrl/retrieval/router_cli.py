"""``mmrl vhop sft|imitate|rl``: the VHOP-Router's three training stages, each from a YAML config
(configs/vhop_sft.yaml, configs/vhop_imitate.yaml, configs/vhop_rl.yaml) plus dotted overrides.

    mmrl vhop sft --config configs/vhop_sft.yaml data.train=world/queries_train.json train.out_dir=runs/vhop/sft
    mmrl vhop imitate --config configs/vhop_imitate.yaml train.init_from=runs/vhop/sft ...
    mmrl vhop rl --config configs/vhop_rl.yaml train.init_from=runs/vhop/imitate rl.ref_from=runs/vhop/sft ...
"""
from __future__ import annotations

import json

from mmrl.retrieval.train_stages import STAGES

HELP = {"sft": "router stage 1: InfoNCE on gold chains (in-batch + hard negatives)",
        "imitate": "router stage 2: DAgger on the chain oracle (next hop / BACKTRACK / STOP), beta 1 -> 0",
        "rl": "router stage 3: GRPO on the chain reward, step-level clipped ratios, KL to the SFT router"}


def _losses():
    from mmrl.retrieval.train_imitate import ImitateLoss
    from mmrl.retrieval.train_rl import RLLoss
    from mmrl.retrieval.train_sft import SFTLoss

    return {"sft": SFTLoss, "imitate": ImitateLoss, "rl": RLLoss}


def run_command(args) -> None:
    from mmrl.errors import ConfigError
    from mmrl.retrieval.train_loop import run_stage
    from mmrl.retrieval.train_stages import load_stage_config

    cfg = load_stage_config(args.stage, args.config or [], args.overrides or [])
    if args.dry_run:
        from omegaconf import OmegaConf

        print(f"# plan: mmrl vhop {args.stage} (config validated, nothing loaded)")
        print(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
        return
    if args.resume and args.overwrite:
        raise ConfigError("--resume and --overwrite exclude each other")
    result = run_stage(cfg, _losses()[args.stage](), resume=args.resume, overwrite=args.overwrite, quiet=args.quiet)
    print(f"mmrl: router {args.stage} finished in {cfg.train.out_dir} (final/router.pt)")
    if result:
        print(json.dumps(result, indent=2))


def add_parser(sub, common=None) -> None:
    v = sub.add_parser("vhop", help="VHOP-Router training stages (sft, imitate, rl)")
    stages = v.add_subparsers(dest="vhop_cmd", required=True, metavar="STAGE")
    for stage in STAGES:
        s = stages.add_parser(stage, help=HELP[stage], description=HELP[stage],
                              parents=[common] if common is not None else [])
        s.add_argument("--config", action="append", help="YAML config (repeatable; later files override)")
        s.add_argument("--dry-run", action="store_true", help="validate the config and print it; load nothing")
        s.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in train.out_dir")
        s.add_argument("--overwrite", action="store_true", help="replace the run in train.out_dir")
        s.add_argument("--quiet", action="store_true", help="no per-step lines")
        s.add_argument("overrides", nargs="*", help="dotted overrides key=value (e.g. train.steps=50)")
        s.set_defaults(fn=run_command, stage=stage)
