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
    assert 0.0 <= m["algo/cvig/no_box_frac"] <= 1.0
    assert m["reward/dspo_evidence/mask_area"] > 0


def _resp(box):
    return (rf"<step1>a dark cue \bboxed{{[{box}]}}</step1><step2>low mood</step2>"
            r"<step3>\list{sadness, fear, gloom, anger, joy}</step3><step4>\boxed{sadness}</step4>")


def test_step_rescoring_zeroes_each_responses_box(tmp_path, tiny_model_path, monkeypatch):
    """The step's ``cvig`` pass (default ``mask: feature``) equals a plain forward whose image features have the
    tokens in that response's own box zeroed; a full box zeroes the whole map; a response without a box is not
    re-scored (NaN) and is counted by the spec."""
    import torch

    from mmrl.data.synth_mood import make_mood_world
    from mmrl.models.feature_mask import prompt_token_mask
    from mmrl.models.scoring import response_logprobs
    from mmrl.train.rl_trainer import RLTrainer
    from mmrl.train.step import gather_batch, rescore

    world = make_mood_world(str(tmp_path / "mood"), n_train=4, n_test=2, seed=0)
    cfg = load_config([str(REPO / "configs" / "dspo_mood.yaml")], [
        f"model.path={tiny_model_path}", f"data.train={world['train']}", f"data.test={world['test']}",
        f"train.out_dir={tmp_path / 'run'}", "rollout.n=2", "rollout.max_new_tokens=4", "train.prompts_per_step=2",
        f"algorithm.params.tokenizer={tiny_model_path}"])
    tr = RLTrainer(cfg, quiet=True)
    si, trajs = tr.rollout(tr.stream.next(2))
    tok = tr.processor.tokenizer
    texts = [_resp("0.0, 0.0, 0.5, 0.5"), _resp("0, 0, 1, 1"), "no box here", _resp("0.5, 0.25, 1.0, 0.75")]
    for t, text in zip(trajs, texts):
        t.text, t.response_ids = text, torch.tensor(tok(text, add_special_tokens=False)["input_ids"])
        t.truncated = False
    rescore(tr, si, trajs)

    def plain(t, mask=None):
        pi = si.requests[t.inputs_key].inputs
        core = tr.model.get_base_model().model if hasattr(tr.model, "get_base_model") else tr.model.model
        orig = type(core).get_image_features

        def zeroed(self, *a, **k):  # independent path: zero rows of get_image_features' output
            out = orig(self, *a, **k)
            out.pooler_output = tuple(f.masked_fill(mask[:, None], 0.0) for f in out.pooler_output)
            return out

        with monkeypatch.context() as m:
            if mask is not None:
                m.setattr(type(core), "get_image_features", zeroed)
            with torch.no_grad():
                return response_logprobs(tr.model, [(pi, t.response_ids)], cfg.rollout.temperature, 1,
                                         tok.pad_token_id)[0]

    boxes = [(0.0, 0.0, 0.5, 0.5), (0.0, 0.0, 1.0, 1.0), None, (0.5, 0.25, 1.0, 0.75)]
    for t, box in zip(trajs, boxes):
        assert torch.allclose(t.rescored["cvig_orig"], plain(t), atol=1e-5)
        if box is None:
            assert torch.isnan(t.rescored["cvig"]).all()
            continue
        mask = prompt_token_mask(si.requests[t.inputs_key].inputs.vision, box)
        assert bool(mask.all()) == (box == (0.0, 0.0, 1.0, 1.0)) and mask.any()
        assert torch.allclose(t.rescored["cvig"], plain(t, mask), atol=1e-5)
        assert not torch.allclose(t.rescored["cvig"], t.rescored["cvig_orig"], atol=1e-4)
    comps, total = tr.rewards(si, trajs)
    batch, _ = gather_batch(tr, trajs, comps, total)
    out = tr.spec.advantages(batch)
    assert out.metrics["cvig/no_box_frac"] == 0.25 and out.metrics["cvig/scored_frac"] == 0.75
    assert tr.spec.params.div_weight == 0.3  # from the dspo_div reward's weight
