"""DSPO end to end on the mood world with the tiny model: the config loads, the step runs both CVIG re-scoring
passes over every response (fixed rollout) and the DSPO reward components and CVIG metrics are logged."""
import pytest

from support import REPO
from mmrl.algos.spec import StepBatch
from mmrl.config import load_config

pytestmark = pytest.mark.slow


def test_dspo_step_on_mood_world(tmp_path, tiny_model_path, monkeypatch):
    from mmrl.algos.dspo import DSPO
    from mmrl.data.synth_mood import make_mood_world
    from mmrl.train.rl_trainer import RLTrainer

    world = make_mood_world(str(tmp_path / "mood"), n_train=4, n_test=2, seed=0)
    cfg = load_config([str(REPO / "configs" / "dspo_mood.yaml")], [
        f"model.path={tiny_model_path}", f"data.train={world['train']}", f"data.test={world['test']}",
        f"train.out_dir={tmp_path / 'run'}", "rollout.n=2", "rollout.max_new_tokens=6", "train.prompts_per_step=2",
        "train.steps=1", f"algorithm.params.tokenizer={tiny_model_path}"])
    seen = []
    orig = DSPO.advantages
    monkeypatch.setattr(DSPO, "advantages", lambda self, b: (seen.append(b), orig(self, b))[1])
    tr = RLTrainer(cfg, quiet=True)
    m = tr.train_step()
    b: StepBatch = seen[-1]
    assert set(b.rescored) == {"cvig", "cvig_orig"}
    assert [x.numel() for x in b.rescored["cvig"]] == b.lengths.tolist()
    for name in ("dspo_accuracy", "dspo_format", "dspo_div", "dspo_div/t4", "dspo_evidence/mask_area"):
        assert f"reward/{name}" in m, name
    assert "algo/cvig/r_cf" in m and 0.0 <= m["algo/cvig/scored_frac"] <= 1.0
    assert m["reward/dspo_evidence/mask_area"] > 0
