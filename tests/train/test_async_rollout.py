"""Asynchronous rollouts (``rollout.asynchronous``, mmrl.train.async_rollout): the schedule and the weight buckets on
hand cases; the config refused naming the key; the worker process at staleness 0 reproduces the synchronous run bit
for bit; at k = 1 every batch is one version old at most; a worker that dies or hangs stops the run with one line
and a checkpoint, whose resume ends where the uninterrupted run does."""
import pytest
import torch

from support import small_overrides, varying_reward_cfg, without_measurements
from mmrl.config import load_config
from mmrl.errors import ConfigError
from mmrl.rollout.weight_channel import buckets
from mmrl.train.rollout_worker import FAULT_ENV
from mmrl.train.async_rollout import AsyncRollouts, RolloutWorkerError, due_version, load_async_state



# ---- hand cases -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k,versions", [(1, [0, 0, 1, 2, 3]), (2, [0, 0, 0, 1, 2]), (3, [0, 0, 0, 0, 1])])
def test_due_version_is_k_updates_behind(k, versions):
    assert [due_version(s, k) for s in range(5)] == versions


@pytest.mark.parametrize("sizes,limit,out", [([4, 4, 4], 8, [(0, 2), (2, 3)]), ([10, 1, 1], 8, [(0, 1), (1, 3)]),
                                             ([3, 3, 3], 100, [(0, 3)]), ([], 8, [])])
def test_weight_buckets(sizes, limit, out):
    assert buckets(sizes, limit) == out


@pytest.mark.parametrize("override,says", [
    ("rollout.asynchronous.max_staleness=-1", "'rollout.asynchronous.max_staleness' must be >= 0"),
    ("rollout.asynchronous.timeout_s=0", "'rollout.asynchronous.timeout_s' must be > 0"),
    ("rollout.asynchronous.bucket_mb=0", "'rollout.asynchronous.bucket_mb' must be >= 1"),
    ("rollout.async.max_staleness=1", "rollout.asynchronous.*: async is a Python keyword"),
])
def test_bad_async_keys_are_named(override, says):
    with pytest.raises(ConfigError, match=says.replace("*", r"\*").replace(".", r"\.")):
        load_config(None, [override])


def test_async_needs_the_torch_backend():
    with pytest.raises(ConfigError, match="rollout.asynchronous.max_staleness' = 1 needs train.backend=torch"):
        load_config(None, ["rollout.asynchronous.max_staleness=1", "train.backend=deepspeed"])


def test_a_checkpoint_in_flight_needs_the_same_staleness():
    state = {"max_staleness": 2, "pending": ["job"], "snapshots": {}}
    with pytest.raises(ConfigError, match="max_staleness' = 0, but the checkpoint was written with 2"):
        load_async_state(None, state)
    with pytest.raises(ConfigError, match="max_staleness' = 1, but the checkpoint was written with 2"):
        load_async_state(AsyncRollouts(None, 1), state)
    load_async_state(None, {"max_staleness": 2, "pending": [], "snapshots": {}})  # nothing in flight: fine


# ---- runs (a worker process each) --------------------------------------------------------------------------------
def _cfg(world, model, out, steps, extra=()):
    return varying_reward_cfg(small_overrides(world, out, model) + [
        f"train.steps={steps}", "train.num_threads=1", "rollout.seed_per_group=true", *extra])


def _run(cfg, worker_k=None, resume=False):
    from mmrl.train.rl_trainer import RLTrainer

    tr = RLTrainer(cfg, quiet=True)
    if worker_k is not None:  # the worker process at this staleness, whatever the config says
        tr.async_rollouts = AsyncRollouts(tr, worker_k, timeout_s=cfg.rollout.asynchronous.timeout_s)
    history = tr.run(resume=resume)
    return history, {k: v.detach().clone() for k, v in tr.model.state_dict().items()}


def _strip(rows):
    return [{k: v for k, v in r.items() if not k.startswith("async/")} for r in without_measurements(rows)]


def _rows(out):
    from mmrl.train.metrics import MetricsLogger

    return _strip(MetricsLogger.read(out / "metrics.jsonl"))


@pytest.fixture(scope="module")
def async1(video_world, tiny_model_path, tmp_path_factory):
    """An uninterrupted k = 1 run of 4 steps."""
    out = tmp_path_factory.mktemp("async1")
    history, weights = _run(_cfg(video_world, tiny_model_path, out, 4, ["rollout.asynchronous.max_staleness=1"]))
    return history, weights, out


@pytest.mark.slow
def test_worker_at_staleness_0_is_the_synchronous_run_bit_for_bit(video_world, tiny_model_path, tmp_path):
    sync, w_sync = _run(_cfg(video_world, tiny_model_path, tmp_path / "sync", 3))
    worker, w_worker = _run(_cfg(video_world, tiny_model_path, tmp_path / "worker", 3), worker_k=0)
    assert [r["async/staleness"] for r in worker] == [0.0, 0.0, 0.0]
    assert _strip(worker) == _strip(sync)  # losses, rewards, KL, clip fractions: every float equal
    assert sync[0]["loss"] != sync[-1]["loss"]
    assert w_sync.keys() == w_worker.keys() and all(torch.equal(w_sync[k], w_worker[k]) for k in w_sync)


@pytest.mark.slow
def test_staleness_is_bounded_by_k(async1):
    history, _, _ = async1
    assert [r["async/version"] for r in history] == [0.0, 0.0, 1.0, 2.0]  # due_version(s, 1) = max(0, s - 1)
    assert [r["async/staleness"] for r in history] == [0.0, 1.0, 1.0, 1.0]
    assert max(r["async/staleness"] for r in history) <= 1


@pytest.mark.slow
@pytest.mark.parametrize("fault,says", [("die:2", "died with exit code 3 before step 2's batch"),
                                        ("hang:2", "sent no batch for step 2 in rollout.asynchronous.timeout_s = 40 s")])
def test_dead_or_hung_worker_checkpoints_and_the_resume_ends_like_the_straight_run(
        fault, says, async1, video_world, tiny_model_path, tmp_path, monkeypatch):
    _, w_straight, straight_out = async1
    out = tmp_path / "run"
    extra = ["rollout.asynchronous.max_staleness=1", "rollout.asynchronous.timeout_s=40"]
    monkeypatch.setenv(FAULT_ENV, fault)
    with pytest.raises(RolloutWorkerError) as err:
        _run(_cfg(video_world, tiny_model_path, out, 4, extra))
    msg = str(err.value)
    assert says in msg and "stopped after step 2, checkpoint" in msg and "resume with:" in msg
    assert "\n" not in msg and (out / "checkpoints" / "step_000002").is_dir()
    monkeypatch.delenv(FAULT_ENV)
    _, w_resumed = _run(_cfg(video_world, tiny_model_path, out, 4, extra), resume=True)
    assert _rows(out) == _rows(straight_out)
    assert all(torch.equal(w_resumed[k], w_straight[k]) for k in w_straight)


# ---- every agent loop through the worker -------------------------------------------------------------------------
from test_stream_rl import _cfg as _stream_cfg, blocks_file  # noqa: E402,F401  (the streaming world and its config)


def _loop_cfg(loop, world, model, out, blocks):
    if loop == "stream":
        cfg = _stream_cfg(blocks, model, out, 2)
        cfg.train.save_every = 0
        return cfg
    return _cfg(world, model, out, 2, ["rollout.seed_per_group=false", "rollout.agent_loop=multi_turn",
                                       "rollout.tools=tools/video_seek.yaml"])


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["multi_turn", "stream"])
def test_multi_turn_and_streaming_loops_run_in_the_worker_bit_for_bit(loop, video_world, tiny_model_path, blocks_file,
                                                                       tmp_path):
    """Loops that draw per episode are seeded per batch under asynchronous rollouts (``async_seeding``): the
    worker's batches equal the ones the trainer draws itself under that seeding."""
    from mmrl.train.rl_trainer import RLTrainer

    here = RLTrainer(_loop_cfg(loop, video_world, tiny_model_path, tmp_path / "here", blocks_file), quiet=True)
    assert here.agent_loop.capabilities.multi_turn
    here.side.seeding = "batch"
    ref = here.run()
    worker, _ = _run(_loop_cfg(loop, video_world, tiny_model_path, tmp_path / "worker", blocks_file), worker_k=0)
    assert _strip(worker) == _strip(ref) and len(ref) == 2


@pytest.mark.slow
def test_ctrl_c_checkpoints_and_the_resume_ends_like_the_straight_run(async1, video_world, tiny_model_path, tmp_path,
                                                                      monkeypatch, capsys):
    """SIGINT to the trainer and the worker (a terminal sends it to both): the worker ignores it, the trainer
    checkpoints after the step; the printed resume command ends where the uninterrupted run does."""
    import multiprocessing
    import os
    import shlex
    import signal

    from mmrl.cli import main
    from mmrl.train.metrics import MetricsLogger

    _, w_straight, straight_out = async1
    out = tmp_path / "run"
    argv = ["train", "--quiet"] + small_overrides(video_world, out, tiny_model_path) + [
        "train.steps=4", "rewards=[{name: test_even_tokens}]", "train.num_threads=1", "rollout.seed_per_group=true",
        "rollout.asynchronous.max_staleness=1"]
    log = MetricsLogger.log

    def log_then_ctrl_c(self, step, metrics):
        log(self, step, metrics)
        if step == 1:
            (worker,) = [p for p in multiprocessing.active_children() if p.name == "mmrl-rollout-worker"]
            os.kill(worker.pid, signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(MetricsLogger, "log", log_then_ctrl_c)
    assert main(argv) == 128 + signal.SIGINT
    line = next(x for x in capsys.readouterr().err.splitlines() if "resume with:" in x)
    assert "SIGINT received: stopped after step 1" in line and (out / "checkpoints" / "step_000001").is_dir()
    monkeypatch.setattr(MetricsLogger, "log", log)
    assert main(shlex.split(line.split("resume with: ", 1)[1])[1:]) == 0
    assert _rows(out) == _rows(straight_out)
    final = torch.load(sorted((out / "checkpoints").glob("step_*"))[-1] / "model.pt")
    assert all(torch.equal(final[k], w_straight[k]) for k in w_straight)


def test_the_run_plan_says_how_rollouts_run():
    from mmrl.train.plan import describe_plan

    assert "rollouts: synchronous, in the trainer" in describe_plan(load_config(None, []))
    lines = describe_plan(load_config(None, ["rollout.asynchronous.max_staleness=2"]))
    assert "rollouts: asynchronous, a worker process draws step s's batch from the weights after max(0, s - 2) " \
           "updates (rollout.asynchronous.max_staleness 2), seeded" in lines
