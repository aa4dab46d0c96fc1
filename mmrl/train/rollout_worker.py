"""The rollout worker process of asynchronous rollouts (``mmrl.train.async_rollout``; ``torch.multiprocessing``
spawn): it builds the model, processor and the ``rollout.engine`` engine from the run's config
(``mmrl.rollout.worker.build_side``), then serves jobs ``(step, samples, group offset, version, algorithm state)``
in order: before each it receives weight messages (``mmrl.rollout.weight_channel``) until it holds ``version``,
then sends back the batch with the version it really used and the seconds it took.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Optional

import torch

from mmrl.rollout.worker import RolloutJob, build_side, dumps, loads

# test hook: "die:STEP" / "hang:STEP" makes the worker exit / stop answering when it reaches STEP's job
FAULT_ENV = "MMRL_TEST_ROLLOUT_WORKER_FAULT"


def _fault(step: int) -> None:
    kind, _, at = os.environ.get(FAULT_ENV, "").partition(":")
    if at and int(at) == step:
        if kind == "die":
            os._exit(3)
        if kind == "hang":
            time.sleep(10 ** 6)


def worker_main(cfg, port: int, jobs, results, num_threads: int, timeout_s: float, bucket_bytes: int) -> None:
    """The rollout worker process: serve ``jobs`` (pickled ``RolloutJob`` bytes; ``None`` ends) into ``results``
    (``("ok", step, version, bytes of (si, trajs), seconds it took)`` or ``("error", step, one line)``). Ctrl-C is the trainer's to
    handle: the worker ignores SIGINT (the terminal sends it to the whole process group)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    step = -1
    try:
        from mmrl.algos.spec import build_algorithm
        from mmrl.models.loading import load_model_and_processor
        from mmrl.rollout.weight_channel import WeightChannel
        from mmrl.train.precision import autocast_factory, keep_fp32_master

        if num_threads > 0:
            torch.set_num_threads(num_threads)
        channel = WeightChannel(WeightChannel.join_store(port, timeout_s), 1, timeout_s, bucket_bytes)
        model, processor = load_model_and_processor(cfg.model)
        keep_fp32_master(model)  # the trainer's dtypes (torch backend), so its weights copy in bit for bit
        model.eval()
        spec = build_algorithm(cfg.algorithm, cfg)
        side = build_side(cfg, model, processor, spec,
                          autocast_factory(cfg.train.precision, next(model.parameters()).device))
        version: Optional[int] = None
        while True:
            data = jobs.get()
            if data is None:
                return
            job: RolloutJob = loads(data)
            step = job.step
            while version is None or version < job.version:
                version = channel.receive(model)
                side.engine.sync_weights(model)  # the HF engine shares the module; vLLM gets the new weights
            if version != job.version:
                raise RuntimeError(f"holds weights {version}, the job needs {job.version}")
            _fault(job.step)
            spec.load_state_dict(job.plan_state)
            t0 = time.perf_counter()
            batch = side.generate(job.samples, job.step, job.group_offset)
            results.put(("ok", job.step, version, dumps(batch), time.perf_counter() - t0))
    except Exception as e:  # noqa: BLE001  (reported to the trainer as one line)
        results.put(("error", step, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
