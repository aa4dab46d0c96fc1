"""Asynchronous rollouts with bounded staleness (``rollout.asynchronous.max_staleness: k``; docs/async_rollouts.md).

A rollout worker process (``mmrl.train.rollout_worker.worker_main``, ``torch.multiprocessing`` spawn) generates the
batches of the next steps while the trainer updates. The schedule is fixed, not timing-dependent:

    step s's batch is generated from the weights after ``due_version(s) = max(0, s - k)`` updates,

so its staleness ``s - due_version(s) <= k`` (checked on every batch taken) and a run is reproducible bit for bit.
While the trainer runs step s (it holds version s) the jobs of steps up to ``s + k`` are submitted: with k = 1 the
batch of step s + 1 is drawn from version s while step s updates (verl's one-step-off, AReaL's
``max_head_offpolicyness = 1``). After each update the trainer snapshots its trainable weights and a sender thread
ships them (``mmrl.rollout.weight_channel``, gloo); the worker takes them between batches.

Checkpoints (choice: regenerate, not drain). A checkpoint after step S holds the jobs in flight (steps S..S+k-1:
their samples, group offsets and due versions) and the trainable weights of the versions they are due to use (at
most k snapshots; LoRA: the adapters). On resume the worker gets those versions first and regenerates the batches
bit for bit (seeded rollouts, ``mmrl.rollout.worker``). Draining the worker into the checkpoint would need a live
worker, which a crash or a hang does not leave; regenerating needs nothing of it, so Ctrl-C, a dead and a hung
worker all checkpoint the same way, and nothing of the media or the trajectories is written.

A worker that dies, reports an error or sends no batch for ``rollout.asynchronous.timeout_s`` raises
``RolloutWorkerError`` (one line); ``RLTrainer`` then checkpoints the last completed step and stops.
"""
from __future__ import annotations

from dataclasses import asdict

import copy
import queue
import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Deque, Dict, List, Optional

import torch

from mmrl.errors import ConfigError, MMRLError
from mmrl.rollout.weight_channel import FULL, TRAINABLE, WeightChannel, model_tensors
from mmrl.rollout.worker import RolloutJob, dumps, loads
from mmrl.train.rollout_worker import worker_main

KEY = "rollout.asynchronous.max_staleness"


class RolloutWorkerError(MMRLError):
    """The rollout worker died, failed or hung; the run stops with a checkpoint."""


def due_version(step: int, max_staleness: int) -> int:
    """The weights (updates done) step ``step``'s batch is generated from."""
    return max(0, step - max_staleness)


class AsyncRollouts:
    """The trainer's end: submits jobs, ships weights, takes batches, checkpoints what is in flight."""

    def __init__(self, trainer, max_staleness: int, timeout_s: float = 600.0, bucket_mb: int = 64):
        self.tr, self.k, self.timeout_s, self.bucket_bytes = trainer, max_staleness, timeout_s, bucket_mb << 20
        self.pending: Deque[RolloutJob] = deque()  # submitted, not yet taken, in step order
        self.snapshots: Dict[int, List[torch.Tensor]] = {}  # version -> trainable weights, for jobs in flight
        self.done: Dict[int, tuple] = {}  # step -> (version, bytes of (si, trajs), generation seconds) received
        self.next_step: Optional[int] = None  # the next step to submit (None: the trainer's step at start)
        self.last: Dict[str, float] = {}  # metrics of the last batch taken
        self.proc = None
        self.send_error: Optional[str] = None

    # ---- state ----------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The jobs in flight and the weights they are due to use (nothing of the worker is needed)."""
        need = {j.version for j in self.pending if j.version < self.tr.step}
        return {"max_staleness": self.k, "pending": [job_state(j) for j in self.pending],
                "snapshots": {v: self.snapshots[v] for v in sorted(need)}}

    def load_state_dict(self, state: Optional[dict]) -> None:
        state = state or {"max_staleness": self.k, "pending": [], "snapshots": {}}
        if state["max_staleness"] != self.k:
            raise ConfigError(f"config key '{KEY}' = {self.k}, but the checkpoint was written with "
                              f"{state['max_staleness']}: resume with the same value")
        self.pending = deque(job_from_state(j) for j in state["pending"])
        self.snapshots = dict(state["snapshots"])
        self.next_step = self.pending[-1].step + 1 if self.pending else None

    # ---- life -----------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the worker, queue the weights it needs (the full state once, then each version in flight and the
        current one) and the jobs in flight (a resumed run's); returns at once."""
        ctx = torch.multiprocessing.get_context("spawn")
        store = WeightChannel.host_store(self.timeout_s)
        self.jobs, self.results = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=worker_main, name="mmrl-rollout-worker", daemon=True,
                                args=(self.tr.cfg, store.port, self.jobs, self.results, torch.get_num_threads(),
                                      self.timeout_s, self.bucket_bytes))
        self.proc.start()
        self.outbox: "queue.Queue" = queue.Queue()
        model, cur = self.tr.model, self.tr.step
        self.outbox.put((-1, FULL, [t.detach().clone() for t in model_tensors(model, FULL)]))
        for v in sorted(v for v in self.snapshots if v < cur):
            self.outbox.put((v, TRAINABLE, self.snapshots[v]))
        self.publish(cur)
        self.sender = threading.Thread(target=self._send_loop, args=(store,), name="mmrl-weight-sender", daemon=True)
        self.sender.start()
        if self.next_step is None:
            self.next_step = cur
        for job in self.pending:
            self.jobs.put(dumps(job))

    def _send_loop(self, store) -> None:
        try:
            # twice the batch timeout: a hung worker is named by the missing batch, not by a blocked send
            channel = WeightChannel(store, 0, 2 * self.timeout_s, self.bucket_bytes)
            while (item := self.outbox.get()) is not None:
                channel.send(*item)
        except Exception as e:  # noqa: BLE001  (surfaces in take() as one line)
            self.send_error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

    def publish(self, version: int) -> None:
        """After update ``version``: snapshot the trainable weights and queue them for the worker (the trainer goes
        on at once; the sender thread ships them)."""
        snap = [p.detach().clone() for p in model_tensors(self.tr.model, TRAINABLE)]
        self.snapshots[version] = snap
        self.outbox.put((version, TRAINABLE, snap))
        oldest = min([j.version for j in self.pending] + [version])
        self.snapshots = {v: s for v, s in self.snapshots.items() if v >= oldest}

    def close(self) -> None:
        if self.proc is None:
            return
        self.outbox.put(None)
        if self.proc.is_alive():
            self.jobs.put(None)
            self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.proc = None

    # ---- the step -------------------------------------------------------------------------------------------------
    def take(self):
        """The trainer's step's ``(StepInputs, trajectories)``: submit the jobs through step + k, wait for this
        step's batch, check its staleness."""
        step, cfg = self.tr.step, self.tr.cfg
        last = min(step + self.k, cfg.train.steps - 1)
        while self.next_step <= last:
            job = RolloutJob(self.next_step, self.tr.stream.next(cfg.train.prompts_per_step), 0,
                             due_version(self.next_step, self.k), copy.deepcopy(self.tr.spec.state_dict()))
            self.pending.append(job)
            self.jobs.put(dumps(job))
            self.next_step += 1
        t0 = time.perf_counter()
        version, data, generation = self._wait(step)
        job = self.pending[0]
        if job.step != step or version != job.version or step - version > self.k:
            raise RolloutWorkerError(f"step {step}'s batch came from weights {version} (due {job.version}, "
                                     f"{KEY} = {self.k})")
        self.pending.popleft()
        self.last = {"async/version": float(version), "async/staleness": float(step - version),
                     "time/rollout_wait": time.perf_counter() - t0, "time/worker_generation": generation}
        t1 = time.perf_counter()
        batch = loads(data)
        self.last["time/rollout_unpack"] = time.perf_counter() - t1
        return batch

    def _wait(self, step: int):
        deadline = time.monotonic() + self.timeout_s
        while step not in self.done:
            if self.send_error is not None:
                self.proc.join(timeout=5)  # a send fails when the worker died: name the death, the cause, first
                self._check_alive(step)
                raise RolloutWorkerError(f"sending weights to the rollout worker failed: {self.send_error}")
            try:
                msg = self.results.get(timeout=0.5)
            except queue.Empty:
                self._check_alive(step)
                if time.monotonic() > deadline:
                    raise RolloutWorkerError(f"the rollout worker sent no batch for step {step} in "
                                             f"rollout.asynchronous.timeout_s = {self.timeout_s:g} s (hung?)") from None
                continue
            if msg[0] == "error":
                raise RolloutWorkerError(f"the rollout worker failed at step {msg[1]}: {msg[2]}")
            self.done[msg[1]] = msg[2:]
        return self.done.pop(step)

    def _check_alive(self, step: int) -> None:
        if not self.proc.is_alive():
            raise RolloutWorkerError(f"the rollout worker (pid {self.proc.pid}) died with exit code "
                                     f"{self.proc.exitcode} before step {step}'s batch") from None


def async_rollouts_for(trainer) -> Optional[AsyncRollouts]:
    """The run's ``AsyncRollouts``, or None when rollouts run in the trainer (``max_staleness`` 0)."""
    a = trainer.cfg.rollout.asynchronous
    return AsyncRollouts(trainer, a.max_staleness, a.timeout_s, a.bucket_mb) if a.max_staleness > 0 else None


def job_state(job: RolloutJob) -> dict:
    """A job as plain containers (checkpoints load with ``torch.load(weights_only=True)``: no pickled classes)."""
    return {"step": job.step, "samples": [asdict(s) for s in job.samples], "group_offset": job.group_offset,
            "version": job.version, "plan_state": job.plan_state}


def job_from_state(d: dict) -> RolloutJob:
    from mmrl.data.schema import Evidence, ImageRef, Sample, VideoRef

    def sample(s: dict) -> Sample:
        s = dict(s)
        s["video"] = VideoRef(**s["video"]) if s.get("video") else None
        s["image"] = ImageRef(**s["image"]) if s.get("image") else None
        ev = dict(s.get("evidence") or {})
        ev["segments"] = [tuple(x) for x in ev.get("segments", [])]
        ev["boxes"] = [(b[0], list(b[1])) for b in ev.get("boxes", [])]
        s["evidence"] = Evidence(**ev)
        return Sample(**s)

    return RolloutJob(d["step"], [sample(s) for s in d["samples"]], d["group_offset"], d["version"], d["plan_state"])


def load_async_state(rollouts: Optional[AsyncRollouts], state: Optional[dict]) -> None:
    """Restore a checkpoint's batches in flight; a checkpoint with batches in flight needs the same staleness."""
    if rollouts is not None:
        rollouts.load_state_dict(state)
    elif state and state["pending"]:
        raise ConfigError(f"config key '{KEY}' = 0, but the checkpoint was written with {state['max_staleness']} "
                          f"and has batches in flight: resume with the same value")


@contextmanager
def running(rollouts: Optional[AsyncRollouts]):
    """The worker lives while the block runs (started after a resume restored what is in flight)."""
    if rollouts is None:
        yield
        return
    rollouts.start()
    try:
        yield
    finally:
        rollouts.close()
