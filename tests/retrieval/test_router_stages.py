"""Router stages on the tiny embedder: each runs, and a stage resumed from a checkpoint ends with exactly the
weights of the uninterrupted run (sampling generator, RNGs, optimizer and the index's corpus embeddings restored)."""
import shutil

import pytest
import torch

from mmrl.errors import ConfigError, MMRLError
from mmrl.retrieval.train_loop import run_stage
from mmrl.retrieval.train_stages import load_stage_config
from mmrl.retrieval.train_imitate import ImitateLoss, beta_at
from mmrl.retrieval.train_rl import RLLoss
from mmrl.retrieval.train_sft import SFTLoss

from support import RAN_ON_LOAD, RunsOnLoad
from tests.retrieval.router_support import make_router_world

SMALL = ["router.top_k=4", "train.batch_size=2", "train.save_every=1", "train.index_refresh=2", "train.lr=1e-3",
         "train.keep=3"]


def _cfg(stage, queries, out, *extra):
    return load_stage_config(stage, [], [f"data.train={queries}", f"train.out_dir={out}", *SMALL, *extra])


def _final(out):
    return torch.load(out / "final" / "router.pt", weights_only=True)


def _resumed_equals_straight(stage, loss, q, tmp_path, *extra):
    a, b = tmp_path / f"{stage}_a", tmp_path / f"{stage}_b"
    run_stage(_cfg(stage, q, a, "train.steps=3", *extra), loss(), quiet=True)
    (b / "checkpoints").mkdir(parents=True)
    shutil.copytree(a / "checkpoints" / "step_000001", b / "checkpoints" / "step_000001")
    run_stage(_cfg(stage, q, b, "train.steps=3", *extra), loss(), resume=True, quiet=True)
    wa, wb = _final(a), _final(b)
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    return wa


@pytest.mark.slow
def test_stages_resume_exactly(tmp_path):
    q = make_router_world(tmp_path / "w", n_images=6)
    sft = _resumed_equals_straight("sft", SFTLoss, q, tmp_path, "sft.hard_negatives=2")
    assert not torch.equal(sft["special"], torch.load(tmp_path / "sft_a" / "checkpoints" / "step_000001" / "state.pt",
                                                     weights_only=True)["router"]["special"])  # steps 2-3 trained
    _resumed_equals_straight("imitate", ImitateLoss, q, tmp_path, f"train.init_from={tmp_path / 'sft_a'}")
    _resumed_equals_straight("rl", RLLoss, q, tmp_path, "rl.group_size=3", f"train.init_from={tmp_path / 'sft_a'}",
                             f"rl.ref_from={tmp_path / 'sft_a'}")


def test_a_resume_state_loads_weights_only_and_a_foreign_pickle_is_refused(tmp_path):
    """state.pt holds tensors and plain containers (read back with weights_only=True); a state.pt holding any other
    object stops the resume with one line naming the file, and its code never runs."""
    q = make_router_world(tmp_path / "w", n_images=4)
    out = tmp_path / "o"
    run_stage(_cfg("sft", q, out, "train.steps=1"), SFTLoss(), quiet=True)
    state_pt = out / "checkpoints" / "step_000001" / "state.pt"
    state = torch.load(state_pt, weights_only=True)
    assert set(state) == {"step", "router", "optimizer", "generator", "rng", "index_embs"} and state["step"] == 1
    torch.save(dict(state, rng=RunsOnLoad()), state_pt)
    RAN_ON_LOAD.clear()
    with pytest.raises(MMRLError, match=r"^checkpoint file .*step_000001/state\.pt holds support\._record_load, "):
        run_stage(_cfg("sft", q, out, "train.steps=2"), SFTLoss(), resume=True, quiet=True)
    assert RAN_ON_LOAD == []


def test_stage_configs_reject_bad_keys(tmp_path):
    q = make_router_world(tmp_path / "w", n_images=4)
    with pytest.raises(ConfigError, match="sft.nope"):
        _cfg("sft", q, tmp_path / "o", "sft.nope=1")
    with pytest.raises(ConfigError, match="rl.ref_from"):
        _cfg("rl", q, tmp_path / "o")  # KL to the SFT router needs it
    with pytest.raises(ConfigError, match="rl.ref_from"):
        _cfg("rl", q, tmp_path / "o", "rl.kl_coef=0", "rl.ref_from=x")  # would change nothing
    with pytest.raises(ConfigError, match="imitate.mode"):
        _cfg("imitate", q, tmp_path / "o", "imitate.mode=argmax")
    with pytest.raises(ConfigError, match="rl"):
        _cfg("sft", q, tmp_path / "o", "rl.group_size=4")  # another stage's section
    with pytest.raises(ConfigError, match="data.train"):
        run_stage(load_stage_config("sft", [], [f"data.train={tmp_path}/missing.json", f"train.out_dir={tmp_path}/o"]),
                  SFTLoss(), quiet=True)


def test_beta_decays_linearly_from_one_to_zero():
    assert [beta_at(i, 5) for i in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert beta_at(0, 1) == 1.0


def test_cli_registers_the_three_stages(capsys):
    from mmrl.cli import main

    assert main(["vhop", "rl", "--dry-run", "data.train=q.json", "train.out_dir=o", "rl.ref_from=s"]) == 0
    assert "group_size: 8" in capsys.readouterr().out
    assert main(["vhop", "imitate", "--dry-run", "data.train=q.json", "train.out_dir=o", "imitate.beta=2"]) == 2
    assert "imitate.beta" in capsys.readouterr().err


def test_a_stage_keeps_the_run_directory_rules(tmp_path):
    """Router training opens its folder with mmrl.train.run_dir: a second run is refused, --overwrite deletes only
    the previous run's artifacts (a file of the user's stays), checkpoints are owned by their run."""
    import json

    q = make_router_world(tmp_path / "w", n_images=4)
    out = tmp_path / "o"
    run_stage(_cfg("sft", q, out, "train.steps=1"), SFTLoss(), quiet=True)
    first = json.loads((out / "run.json").read_text())
    assert first["kind"] == "router_sft"
    assert json.loads((out / "checkpoints" / "step_000001" / "owner.json").read_text())["run_id"] == first["run_id"]
    with pytest.raises(ConfigError, match="already holds a run"):
        run_stage(_cfg("sft", q, out, "train.steps=1"), SFTLoss(), quiet=True)
    (out / "notes.txt").write_text("mine")
    run_stage(_cfg("sft", q, out, "train.steps=1"), SFTLoss(), overwrite=True, quiet=True)
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "run.json").read_text())["run_id"] != first["run_id"]
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1  # the old run's lines went with it
    with pytest.raises(ConfigError, match="holds an 'router_sft' run, not a 'router_rl' run"):
        run_stage(_cfg("rl", q, out, "train.steps=1", f"rl.ref_from={out}"), RLLoss(), resume=True, quiet=True)


def test_a_stage_starts_from_a_saved_embedder(tmp_path):
    """model.path may name a saved embedder (e.g. pre-trained with attribute heads): the router starts from its
    weights, not a fresh head; a config that contradicts its embedder.json is a ConfigError naming the key."""
    from mmrl.retrieval.embedder import Embedder
    from mmrl.retrieval.train_common import build_router
    from mmrl.retrieval.train_data import load_data

    q = make_router_world(tmp_path / "w", n_images=4)
    emb = Embedder.from_pretrained("tiny", pooling="mean")
    with torch.no_grad():
        emb.head.weight.mul_(2.0)  # not the identity a fresh head starts from
        next(emb._backbone().language_model.parameters()).add_(0.5)
    saved = emb.save(str(tmp_path / "pretrained"))
    cfg = _cfg("sft", q, tmp_path / "o", f"model.path={saved}", "model.pooling=mean", "train.steps=1",
               "model.freeze_vision=true")
    router = build_router(cfg, load_data(cfg, say=lambda *_: None)[0])
    assert torch.equal(router.embedder.head.weight, emb.head.weight)
    got, want = router.embedder.state_dict(), emb.state_dict()
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert not any(p.requires_grad for p in router.embedder._backbone().visual.parameters())
    assert run_stage(cfg, SFTLoss(), quiet=True) == {}  # trains from it (no data.eval: no evaluation)
    with pytest.raises(ConfigError, match="'model.pooling' = 'last', but the saved embedder"):
        build_router(_cfg("sft", q, tmp_path / "o2", f"model.path={saved}", "model.pooling=last"), None)
    with pytest.raises(ConfigError, match="'model.dim' = 8"):
        build_router(_cfg("sft", q, tmp_path / "o2", f"model.path={saved}", "model.pooling=mean", "model.dim=8"), None)
