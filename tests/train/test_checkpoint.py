"""Checkpoints on a tiny module: pruning keeps the newest, "latest" is the newest, and a resume restores the
model, AdamW's moments, the warm-up scheduler and every RNG, so the next steps equal an uninterrupted run."""
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mmrl.errors import MMRLError
from mmrl.train.checkpoint import (latest_checkpoint, load_checkpoint, load_state, rng_state, save_checkpoint,
                                   set_rng_state, write_checkpoint)
from mmrl.train.optim import build_optimizer
from support import RAN_ON_LOAD, RunsOnLoad


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.frozen = torch.nn.Linear(2, 2)
        self.frozen.requires_grad_(False)


def cfg(lr=0.1, warmup=3, wd=0.0):
    return SimpleNamespace(lr=lr, warmup_steps=warmup, weight_decay=wd)


def fresh(seed=0, **kw):
    torch.manual_seed(seed)
    model = Tiny()
    opt, sched = build_optimizer(model, cfg(**kw))
    return model, opt, sched


def train_step(model, opt, sched):
    """One step whose data and noise come from all three RNGs, so a wrong RNG restore changes the result."""
    x = torch.randn(4, 3) + float(np.random.rand()) + random.random()
    loss = model.lin(x).pow(2).mean() + model.frozen(model.lin(x)).sum() * 0.0
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    return float(loss.detach())


def steps(root):
    return sorted(p.name for p in (root / "checkpoints").iterdir())


# ---- pruning and latest -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("keep,left", [(2, ["step_000004", "step_000010"]), (1, ["step_000010"]),
                                       (3, ["step_000003", "step_000004", "step_000010"]),
                                       (0, ["step_000001", "step_000002", "step_000003", "step_000004", "step_000010"])])
def test_pruning_keeps_the_newest(tmp_path, keep, left):
    model, opt, sched = fresh()
    for s in (1, 2, 3, 4, 10):  # 10 sorts after 4 because names are zero-padded
        path = save_checkpoint(str(tmp_path), s, model, opt, sched, {}, keep=keep)
        assert path.name == f"step_{s:06d}" and path.is_dir()
    assert steps(tmp_path) == left
    assert latest_checkpoint(str(tmp_path)).name == "step_000010"


def test_default_keeps_two_and_negative_keep_keeps_all(tmp_path):
    model, opt, sched = fresh()
    for s in (1, 2, 3):
        save_checkpoint(str(tmp_path / "a"), s, model, opt, sched, {})
        save_checkpoint(str(tmp_path / "b"), s, model, opt, sched, {}, keep=-1)
    assert steps(tmp_path / "a") == ["step_000002", "step_000003"]
    assert steps(tmp_path / "b") == ["step_000001", "step_000002", "step_000003"]


def test_save_creates_missing_folders_and_replaces_a_stale_temporary_folder(tmp_path):
    import os

    model, opt, sched = fresh()
    out = tmp_path / "runs" / "deep" / "run1"  # none of these exist yet
    stale = out / "checkpoints" / f".tmp_step_000001_{os.getpid()}"
    path = save_checkpoint(str(out), 1, model, opt, sched, {})
    assert path.is_dir() and sorted(p.name for p in path.iterdir()) == ["model.pt", "trainer_state.pt"]
    stale.mkdir()
    (stale / "junk").write_text("from a crashed save")
    path = save_checkpoint(str(out), 1, model, opt, sched, {})
    assert not stale.exists() and sorted(p.name for p in path.iterdir()) == ["model.pt", "trainer_state.pt"]


def test_write_checkpoint_keeps_two_by_default(tmp_path):
    for step in (1, 2, 3):
        write_checkpoint(str(tmp_path), step, {"state.pt": {"step": step}})
    assert steps(tmp_path) == ["step_000002", "step_000003"]


def test_latest_is_the_highest_step_and_ignores_temporary_folders(tmp_path):
    assert latest_checkpoint(str(tmp_path)) is None
    model, opt, sched = fresh()
    for s in (9, 12, 100):
        save_checkpoint(str(tmp_path), s, model, opt, sched, {}, keep=0)
    (tmp_path / "checkpoints" / ".tmp_step_000200_1").mkdir()  # a crashed save
    assert latest_checkpoint(str(tmp_path)).name == "step_000100"
    assert not any(p.name.startswith(".tmp") and "000100" in p.name for p in (tmp_path / "checkpoints").iterdir())


def test_saving_a_step_again_replaces_it(tmp_path):
    model, opt, sched = fresh()
    save_checkpoint(str(tmp_path), 5, model, opt, sched, {"pos": 1})
    save_checkpoint(str(tmp_path), 5, model, opt, sched, {"pos": 2})
    assert steps(tmp_path) == ["step_000005"]
    state = load_checkpoint(tmp_path / "checkpoints" / "step_000005", *fresh())
    assert state["pos"] == 2 and state["step"] == 5


# ---- resume -----------------------------------------------------------------------------------------------------


def test_resume_equals_an_uninterrupted_run(tmp_path):
    model, opt, sched = fresh(lr=0.05, warmup=4)
    for _ in range(3):
        train_step(model, opt, sched)
    save_checkpoint(str(tmp_path), 3, model, opt, sched, {"data_pos": 17})
    straight = [train_step(model, opt, sched) for _ in range(3)]
    lrs_straight = sched.get_last_lr()
    params_straight = [p.detach().clone() for p in model.parameters()]

    torch.manual_seed(123)  # anything: the checkpoint must restore every RNG
    np.random.seed(123)
    random.seed(123)
    model2, opt2, sched2 = fresh(seed=99, lr=0.05, warmup=4)
    state = load_checkpoint(latest_checkpoint(str(tmp_path)), model2, opt2, sched2)
    assert state["step"] == 3 and state["data_pos"] == 17
    resumed = [train_step(model2, opt2, sched2) for _ in range(3)]
    assert resumed == straight
    assert sched2.get_last_lr() == lrs_straight
    assert all(torch.equal(a, b.detach()) for a, b in zip(params_straight, model2.parameters()))


def test_resume_restores_adam_moments_and_scheduler_position(tmp_path):
    model, opt, sched = fresh(lr=0.1, warmup=4)
    for _ in range(2):
        train_step(model, opt, sched)
    save_checkpoint(str(tmp_path), 2, model, opt, sched, {})
    model2, opt2, sched2 = fresh(seed=5, lr=0.1, warmup=4)
    load_checkpoint(tmp_path / "checkpoints" / "step_000002", model2, opt2, sched2)
    st, st2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert st.keys() == st2.keys() and len(st) == 2  # lin.weight and lin.bias only: frozen ones have no state
    for k in st:
        assert torch.equal(st[k]["exp_avg"], st2[k]["exp_avg"]) and torch.equal(st[k]["exp_avg_sq"], st2[k]["exp_avg_sq"])
        assert float(st[k]["step"]) == float(st2[k]["step"]) == 2.0
    assert sched2.last_epoch == 2 and sched2.get_last_lr() == pytest.approx([0.1 * 3 / 4])


def test_resume_without_a_scheduler(tmp_path):
    model, opt, _ = fresh()
    save_checkpoint(str(tmp_path), 1, model, opt, None, {})
    model2, opt2, sched2 = fresh(seed=4)
    load_checkpoint(tmp_path / "checkpoints" / "step_000001", model2, opt2, sched2)
    assert sched2.last_epoch == 0  # untouched
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), model2.state_dict().values()))


def test_cuda_rng_saved_and_restored_only_where_cuda_is(monkeypatch):
    restored = []
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: ["cuda-state"])
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda s: restored.append(s))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    state = rng_state()
    assert state["cuda"] is None
    set_rng_state(dict(state, cuda=["saved-on-gpu"]))  # resumed on a machine without CUDA: skipped
    assert restored == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    state = rng_state()
    assert state["cuda"] == ["cuda-state"]
    set_rng_state(dict(state, cuda=None))  # saved without CUDA: nothing to restore
    assert restored == []
    set_rng_state(state)
    assert restored == [["cuda-state"]]


def test_rng_state_round_trip():
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    state = rng_state()
    first = (torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)])
    set_rng_state(state)
    again = (torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)])
    assert first == again


# ---- what a checkpoint file may hold ----------------------------------------------------------------------------

def test_every_checkpoint_file_loads_with_weights_only(tmp_path):
    model, opt, sched = fresh()
    train_step(model, opt, sched)
    path = save_checkpoint(str(tmp_path), 1, model, opt, sched, {"data": {"epoch": 1, "pos": 8}, "algorithm": {"n": [2]}})
    for name in ("model.pt", "trainer_state.pt"):
        torch.load(path / name, weights_only=True)  # raises on anything but tensors and plain containers
    state = load_checkpoint(path, *fresh(seed=3))
    assert state["data"] == {"epoch": 1, "pos": 8} and state["algorithm"] == {"n": [2]} and state["step"] == 1


def test_numpy_rng_state_survives_weights_only_with_a_cached_gaussian(tmp_path):
    """numpy's legacy Gaussian draws in pairs: after one draw the second is cached (has_gauss = 1); the saved state
    must keep it, or the next draw differs."""
    np.random.seed(3)
    np.random.standard_normal()
    torch.save(rng_state(), tmp_path / "rng.pt")
    expected = [np.random.standard_normal() for _ in range(3)] + [float(np.random.rand())]
    np.random.seed(0)
    set_rng_state(load_state(tmp_path / "rng.pt"))
    assert [np.random.standard_normal() for _ in range(3)] + [float(np.random.rand())] == expected


def test_a_checkpoint_file_holding_an_arbitrary_object_is_refused_without_running_it(tmp_path, monkeypatch):
    """Refused even where the environment tells torch to unpickle fully by default (weights_only passed explicitly)."""
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    model, opt, sched = fresh()
    path = save_checkpoint(str(tmp_path), 1, model, opt, sched, {})
    torch.save({"step": 1, "rng": RunsOnLoad()}, path / "trainer_state.pt")
    RAN_ON_LOAD.clear()
    with pytest.raises(MMRLError) as e:
        load_checkpoint(path, *fresh())
    assert str(e.value) == (f"checkpoint file {path / 'trainer_state.pt'} holds support._record_load, which is not a "
                            "tensor or a plain container: refused (torch.load weights_only=True); use checkpoints "
                            "written by this version of mmrl")
    assert RAN_ON_LOAD == []
    (path / "model.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(MMRLError) as e:
        load_checkpoint(path, *fresh())
    assert str(e.value) == (f"checkpoint file {path / 'model.pt'} is not a file of tensors and plain containers: "
                            "refused (torch.load weights_only=True); use checkpoints written by this version of mmrl")


# ---- the optimizer and its warm-up ------------------------------------------------------------------------------


@pytest.mark.parametrize("warmup,lrs", [(0, [0.2, 0.2, 0.2, 0.2]), (1, [0.2, 0.2, 0.2, 0.2]),
                                        (4, [0.05, 0.1, 0.15, 0.2, 0.2, 0.2])])
def test_linear_warmup_then_constant(warmup, lrs):
    model, opt, sched = fresh(lr=0.2, warmup=warmup)
    seen = []
    for _ in lrs:
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx(lrs)


def test_optimizer_trains_only_trainable_parameters_with_weight_decay():
    model, opt, _ = fresh(lr=0.3, wd=0.05)
    params = opt.param_groups[0]["params"]
    assert {id(p) for p in params} == {id(model.lin.weight), id(model.lin.bias)}
    assert opt.param_groups[0]["weight_decay"] == 0.05 and isinstance(opt, torch.optim.AdamW)
    assert fresh(wd=0.0)[1].param_groups[0]["weight_decay"] == 0.0  # not AdamW's own default (0.01)
    opt2, _ = build_optimizer(model, cfg(lr=0.3), lr=0.7)
    assert opt2.param_groups[0]["initial_lr"] == 0.7 and opt2.param_groups[0]["lr"] == pytest.approx(0.7 / 3)
    model.requires_grad_(False)
    with pytest.raises(ValueError, match=r"^no trainable parameters \(check model.freeze_vision / model.lora\)$"):
        build_optimizer(model, cfg())


# ---- the data position (the only other part of an exact resume) -------------------------------------------------


def test_data_stream_resumes_mid_epoch_through_a_checkpoint(tmp_path):
    from mmrl.data.schema import Sample
    from mmrl.train.data_stream import DataStream

    samples = [Sample(id=f"s{i}", question="?", candidates=["a", "b"], answer="a") for i in range(5)]
    stream = DataStream(samples, seed=3)
    first = [s.id for s in stream.next(3) + stream.next(4)]  # crosses into epoch 1
    model, opt, sched = fresh()
    save_checkpoint(str(tmp_path), 2, model, opt, sched, {"data": stream.state_dict()})
    straight = [s.id for s in stream.next(6)]
    again = DataStream(samples, seed=3)
    again.load_state_dict(load_checkpoint(latest_checkpoint(str(tmp_path)), *fresh())["data"])
    assert [s.id for s in again.next(6)] == straight
    assert sorted(first[:5]) == [f"s{i}" for i in range(5)]  # an epoch is a permutation
    assert first[:5] != [s.id for s in DataStream(samples, seed=4).next(5)]  # the seed sets the order
    assert [s.id for s in DataStream(samples, seed=3, shuffle=False).next(7)] == [f"s{i % 5}" for i in range(7)]
