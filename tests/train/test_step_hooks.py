"""The step calls the spec's hooks without knowing its name: re-scoring under an intervention (fixed rollout),
per-token advantages, pruning by ``select`` (pruned rows enter no pass), state saved with the checkpoint, the plan."""
from dataclasses import dataclass

import pytest
import torch

from support import small_overrides
from mmrl.algos.base import AdvantageOutput
from mmrl.algos.spec import AlgorithmSpec, Intervention, Needs, Selection, register_algorithm
from mmrl.config import load_config

pytestmark = pytest.mark.slow


@dataclass
class _ProbeParams:
    token: int = 0  # the one response token that carries advantage 1
    drop_odd: bool = False


@register_algorithm("test_probe")
class _Probe(AlgorithmSpec):
    """Per-token advantage 1 on one token, re-scoring under a gray canvas, optional pruning, a counter as state."""

    Params = _ProbeParams
    seen = []

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.calls = 0

    def needs(self):
        return Needs(rescore={"gray": Intervention("gray", {"value": 128})})

    def advantages(self, batch):
        _Probe.seen.append(batch)
        T = int(batch.lengths.max())
        adv = torch.zeros(len(batch), T)
        adv[:, self.params.token] = 1.0
        return AdvantageOutput(advantages=adv)

    def select(self, batch, out):
        mask = torch.ones(len(batch), dtype=torch.bool)
        if self.params.drop_odd:
            mask[1::2] = False
        return Selection(train_mask=mask, metrics={"kept": float(mask.sum())})

    def after_step(self, batch, selection, epoch_ended):
        self.calls += 1
        return {"calls": float(self.calls)}

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = int(state.get("calls", 0))


def _trainer(video_world, tiny_model_path, out, extra=()):
    from mmrl.train.rl_trainer import RLTrainer

    cfg = load_config(None, small_overrides(video_world, out, tiny_model_path)
                      + ["algorithm.name=test_probe", "train.steps=1", "rollout.max_new_tokens=4", *extra])
    return RLTrainer(cfg, quiet=True)


def test_rescoring_equals_a_plain_forward_under_the_intervened_media(video_world, tiny_model_path, tmp_path):
    from mmrl.media.inputs import build_prompt_inputs_batch
    from mmrl.media.prompts import build_messages
    from mmrl.models.scoring import response_logprobs
    from mmrl.rollout.step_inputs import style_from
    from mmrl.views.transforms import apply_transform

    tr = _trainer(video_world, tiny_model_path, tmp_path / "r")
    _Probe.seen.clear()
    tr.train_step()
    batch = _Probe.seen[-1]
    assert set(batch.rescored) == {"gray"}
    assert [x.numel() for x in batch.rescored["gray"]] == batch.lengths.tolist()
    # recompute one trajectory's re-scored log-probs by hand: gray canvas, same prompt, plain scorer
    ids = batch.response_ids[0]
    sample = next(s for s in tr.samples if s.id in {sid for sid in [*_sample_ids(tr)]})
    del sample
    si, trajs = tr.rollout(tr.stream.next(1))
    t = trajs[0]
    from mmrl.train.step import rescore

    rescore(tr, si, trajs)
    view = si.views[(t.sample_id, t.view)]
    gray = apply_transform("gray", view.media, si.samples[t.sample_id], torch.Generator().manual_seed(0), value=128)
    msgs = build_messages(si.samples[t.sample_id].question, si.candidates[(t.sample_id, t.view)], gray, style_from(tr.cfg.data))
    pi = build_prompt_inputs_batch(tr.processor, [(msgs, gray, t.sample_id)])[0]
    with torch.no_grad():
        plain = response_logprobs(tr.model, [(pi, t.response_ids)], 1.0, 1, tr.processor.tokenizer.pad_token_id)[0]
        orig = response_logprobs(tr.model, [(si.requests[t.inputs_key].inputs, t.response_ids)], 1.0, 1,
                                 tr.processor.tokenizer.pad_token_id)[0]
    assert torch.allclose(t.rescored["gray"], plain, atol=1e-5)
    assert not torch.allclose(t.rescored["gray"], orig, atol=1e-4)  # the intervention changed the input
    assert ids.numel() > 0


def _sample_ids(tr):
    return [s.id for s in tr.samples]


def test_per_token_advantages_reach_the_loss(video_world, tiny_model_path, tmp_path):
    tr = _trainer(video_world, tiny_model_path, tmp_path / "t")
    _Probe.seen.clear()
    m = tr.train_step()
    batch = _Probe.seen[-1]
    # ratio = 1 (one epoch): PPO token-mean loss = -(sum of advantages over trained tokens) / trained tokens
    expected = -float(len(batch)) / float(batch.lengths.sum())
    assert m["loss"] == pytest.approx(expected, rel=1e-5)
    assert m["algo/calls"] == 1.0 and m["grad_norm"] > 0
    # the step runs on a context, not the trainer, and leaves the count to its caller
    from mmrl.train.step import StepContext, train_step

    ctx = tr.step_context()
    assert isinstance(ctx, StepContext) and ctx.step == tr.step == 1 and ctx.loop.metrics == ()
    train_step(ctx)
    assert _Probe.seen[-1].step == 1 and tr.step == 1 and ctx.step == 1


def test_pruned_rows_enter_no_pass_and_state_is_checkpointed(video_world, tiny_model_path, tmp_path):
    tr = _trainer(video_world, tiny_model_path, tmp_path / "p",
                  ["algorithm.params.drop_odd=true", "algorithm.kl_coef=0.05", "algorithm.ppo_epochs=2"])
    rows = {"train": 0, "score": []}
    train_lp, score = tr.backend.train_logprobs, tr.backend.score

    def counted_train(items):
        rows["train"] += len(items)
        return train_lp(items)

    def counted_score(items, reference=False, fallback=None):
        rows["score"].append(len(items))
        return score(items, reference=reference, fallback=fallback)

    tr.backend.train_logprobs, tr.backend.score = counted_train, counted_score
    _Probe.seen.clear()
    m = tr.train_step()
    n = len(_Probe.seen[-1])
    kept = (n + 1) // 2
    assert m["algo/kept"] == kept and m["train_frac"] == pytest.approx(kept / n)
    # score calls: the gray re-scoring (all rows), then reference and old log-probs (kept rows only)
    assert rows["score"] == [n, kept, kept]
    assert rows["train"] == 2 * kept  # two PPO epochs over the kept rows
    tr.save()
    tr2 = _trainer(video_world, tiny_model_path, tmp_path / "p", ["algorithm.params.drop_odd=true", "algorithm.kl_coef=0.05"])
    assert tr2.resume() and tr2.spec.calls == 1 and tr2.step == 1


def test_dry_run_plan_lists_roles_and_passes():
    from support import REPO
    from mmrl.errors import ConfigError
    from mmrl.train.plan import describe_plan

    cfg = load_config([str(REPO / "configs" / "demo.yaml"), str(REPO / "configs" / "bpo_demo.yaml")], [])
    cfg.algorithm.viewset = str(REPO / cfg.algorithm.viewset)
    text = "\n".join(describe_plan(cfg))
    assert "[color]: original (anchor) 2, noise_mild (stable) 2, occlude_obj (sensitive) 2, blank (abstain) 2 = 8" in text
    assert "[default]: original (anchor) 4, blank (abstain) 4 = 8" in text
    assert "passes per step: generate, actor forward+backward x 1" in text
    cfg.rollout.n = 6
    with pytest.raises(ConfigError, match="rollout.n"):
        describe_plan(cfg)
    tg = load_config([str(REPO / "configs" / "demo.yaml"), str(REPO / "configs" / "tgrpo_demo.yaml")], ["algorithm.kl_coef=0.04"])
    tg.algorithm.viewset = str(REPO / tg.algorithm.viewset)
    text = "\n".join(describe_plan(tg))
    assert "original (anchor) 8, shuffled (shuffled) 4 = 12" in text and "reference log-probs" in text
    probe = load_config(None, ["algorithm.name=test_probe"])
    assert "re-score under 'gray' (gray)" in "\n".join(describe_plan(probe))
