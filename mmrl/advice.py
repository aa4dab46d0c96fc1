"""Every config change mmrl suggests (in an error message or in the run report), in one place.

A message says ``f"... {advice('vllm_on_cpu')}"``; ``tests/core/test_advice.py`` applies every entry as dotted
overrides to a config where it would be given (``given``) and runs the result through validation, and checks that
no module spells a ``section.key=value`` suggestion of its own. An entry's ``overrides`` may hold ``{name}`` fields
that the message fills (``advice('bpo_rollout_n', n=8)``); ``example`` fills them for the test.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Tuple


@dataclass(frozen=True)
class Advice:
    overrides: Tuple[str, ...]  # dotted key=value overrides, as the message prints them
    given: Tuple[str, ...] = ()  # overrides of a config the advice is given to (the test's starting point)
    example: Dict[str, object] = field(default_factory=dict)  # values of the {fields} in overrides, for the test


ADVICE: Dict[str, Advice] = {
    # the run report: most groups carry no signal -> DAPO's dynamic sampling (on by default in DAPO)
    "no_signal": Advice(("algorithm.name=dapo",)),
    "more_responses": Advice(("rollout.n={n}",), example={"n": 16}),
    "skip_bad_data": Advice(("data.on_error=skip",)),
    "vllm_on_cpu": Advice(("rollout.engine=hf",), given=("rollout.engine=vllm",)),
    "vllm_server": Advice(("rollout.vllm_mode=server",), given=("rollout.engine=vllm",)),
    "no_deepspeed": Advice(("train.backend=torch",), given=("train.backend=deepspeed",
                                                            "train.deepspeed_config=configs/deepspeed/zero2.json")),
    "no_flash_attn": Advice(("model.attn_implementation=sdpa",)),
    "no_cuda_device": Advice(("model.device=auto",), given=("model.device=cuda",)),
    "dapo_no_accuracy": Advice(("algorithm.params.dynamic_sampling=false",), given=("algorithm.name=dapo",)),
    "needs_viewset": Advice(("algorithm.viewset=views/bpo_video.yaml",), given=("algorithm.name=bpo",)),
    "bpo_rollout_n": Advice(("rollout.n={n}",), given=("algorithm.name=bpo", "algorithm.viewset=views/bpo_video.yaml"),
                            example={"n": 8}),
    "bf16_master": Advice(("train.precision=bf16",), given=("model.dtype=bfloat16", "train.precision=fp32")),
    "fp32_weights": Advice(("model.dtype=float32",), given=("model.dtype=bfloat16", "train.precision=fp32")),
    "fp16_to_bf16": Advice(("model.dtype=bfloat16", "train.precision=bf16"), given=("model.dtype=float16",)),
    "fp16_deepspeed": Advice(("train.backend=deepspeed", "train.deepspeed_config=configs/deepspeed/zero2.json"),
                             given=("model.dtype=float16",)),
    "multi_turn_engine": Advice(("rollout.engine=hf",), given=("rollout.agent_loop=multi_turn",
                                                               "rollout.tools=tools/video_seek.yaml")),
}


def advice(name: str, **values) -> str:
    """The suggestion ``name`` as a message prints it: its overrides, space-separated, ``{fields}`` filled."""
    return " ".join(o.format(**values) for o in ADVICE[name].overrides)
