"""The step's resampling round (``mmrl.train.step``), model-free: a second round's rows get their rewards and their
re-scored log-probs row for row with the merged batch, their prompt inputs re-based, and only they are re-scored.

A hand-built step: round 1 draws samples a and b (two responses each), the spec asks for two more prompts, round 2
draws c and e (one response each) and skips d. The fake scorer returns ``shift(inputs) - token_id / 100`` per token, where an
intervened prompt of sample a, b, c, e has shift -1, -2, -3, -4 and a plain prompt shift 0, so every expected log-prob
below is written out by hand from the rows' tokens."""
from types import SimpleNamespace

import pytest
import torch

from mmrl.algos.base import AdvantageOutput
from mmrl.algos.spec import Intervention, Needs, Selection
from mmrl.data.schema import Sample, Trajectory
from mmrl.rollout.step_inputs import StepInputs
import mmrl.train.step as step_mod

SHIFT = {"a": -1.0, "b": -2.0, "c": -3.0, "e": -4.0}
# (sample, text, response ids) of each round's rows; reward = 1 for "A" + 0.1 per token
ROUND1 = [("a", "A", [11, 12]), ("a", "B", [13]), ("b", "A", [21, 22, 23]), ("b", "B", [24])]
ROUND2 = [("c", "A", [31]), ("e", "B", [42, 43])]
REWARDS = [1.2, 0.1, 1.3, 0.1, 1.1, 0.2]
RESCORED = [[-1.11, -1.12], [-1.13], [-2.21, -2.22, -2.23], [-2.24], [-3.31], [-4.42, -4.43]]
SEED, STEP = 7, 3


def _close(rows, expected):
    return len(rows) == len(expected) and all(r.tolist() == pytest.approx(e, abs=1e-6) for r, e in zip(rows, expected))


def _rollout_of(rows, offset, skipped=(), time_decode=0.0):
    si = StepInputs(skipped=list(skipped), time_decode=time_decode, time_views=time_decode / 2)
    trajs = []
    for sid in dict.fromkeys(s for s, _, _ in rows):
        si.samples[sid] = Sample(sid, "q?", ["A", "B"], "A")
        si.candidates[(sid, "original")] = ["A", "B"]
        si.requests.append(SimpleNamespace(inputs=SimpleNamespace(sid=sid, shift=0.0, num_tokens=10 * len(si.requests) + 10)))
    keys = {sid: i for i, sid in enumerate(si.samples)}
    for sid, text, ids in rows:
        trajs.append(Trajectory(sample_id=sid, group_id=offset + keys[sid], view="original", role="anchor",
                                prompt_ids=torch.zeros(1, dtype=torch.long), response_ids=torch.tensor(ids),
                                logprobs=torch.full((len(ids),), -0.5), loss_mask=torch.ones(len(ids), dtype=torch.bool),
                                text=text, expected="A", inputs_key=keys[sid]))
    return si, trajs


class _Backend:
    rank, world_size, model = 0, 1, "the model"

    def __init__(self):
        self.scores, self.reduced = [], []

    def all_reduce(self, values, op="sum"):
        self.reduced.append((list(values), op))
        return [float(v) for v in values]

    def gather(self, obj):
        return [obj]

    def is_main(self):
        return True

    def score(self, items, reference=False, fallback=None):
        self.scores.append((reference, items, fallback))
        return [torch.full((ids.numel(),), inputs.shift) - ids.float() / 100 for inputs, ids in items]

    def scheduler_step(self):
        pass

    def sync_rollout_weights(self, engine):
        pass

    def lr(self):
        return 0.0


class _Spec:
    """Asks for two more prompts once (at most ``rounds`` rounds), then trains every row but the second."""

    def __init__(self, needs, rounds=2, always=False):
        self._needs, self.rounds, self.always, self.seen = needs, rounds, always, []

    def needs(self):
        return self._needs

    def max_resample_rounds(self):
        return self.rounds

    def advantages(self, batch):
        self.seen.append(batch)
        return AdvantageOutput(advantages=batch.rewards.clone())

    def select(self, batch, out):
        if len(self.seen) == 1 or self.always:
            return Selection(train_mask=torch.ones(len(batch), dtype=torch.bool), resample=2)
        mask = torch.ones(len(batch), dtype=torch.bool)
        mask[1] = False
        return Selection(train_mask=mask)

    def after_step(self, batch, sel, epoch_ended):
        return {}


def _rewards(si, trajs):
    if not trajs:  # as RLTrainer.rewards: no components at all
        return {}, torch.zeros(0)
    acc = [1.0 if t.text == "A" else 0.0 for t in trajs]
    return {"acc": torch.tensor(acc)}, torch.tensor([a + 0.1 * t.response_ids.numel() for a, t in zip(acc, trajs)])


def _context(monkeypatch, intervention, second=ROUND2, **spec):
    rec = {"rollouts": [], "built": [], "updates": [], "skips": []}
    draws = iter([["a", "b"], ["c", "e"], ["f", "g"]])

    def rollout(samples, group_offset=0):
        rec["rollouts"].append((samples, group_offset))
        return _rollout_of(ROUND1, 0, time_decode=0.25) if group_offset == 0 else \
            _rollout_of(second, group_offset, skipped=[("d", "bad video")], time_decode=0.5)

    def intervened(si, keys, processor, data_cfg, transform, params, seed):
        rec["built"].append((list(keys), processor, data_cfg, transform, params, seed))
        return {k: SimpleNamespace(sid=k[0], shift=SHIFT[k[0]]) for k in keys}

    def update(be, trajs, inputs, adv, cfg_algo, micro_batch, old, ref, fallback=None):
        rec["updates"].append((trajs, inputs, adv, old, ref, fallback))
        return {"loss": 0.0}

    monkeypatch.setattr(step_mod, "intervened_inputs", intervened)
    monkeypatch.setattr(step_mod, "policy_update", update)
    cfg = SimpleNamespace(train=SimpleNamespace(prompts_per_step=2, seed=SEED, micro_batch=4, out_dir="unused"),
                          algorithm=SimpleNamespace(kl_coef=0.05, ppo_epochs=1), data="the data section")
    skips = SimpleNamespace(excluded=set(), add=lambda pairs, where, step: rec["skips"].append((list(pairs), step)))
    ctx = step_mod.StepContext(
        cfg=cfg, backend=_Backend(), spec=_Spec(Needs(rescore={"gray": intervention}), **spec),
        stream=SimpleNamespace(next=lambda n: next(draws)[:n], epoch=0), processor="the processor", engine=None,
        rollout=rollout, rewards=_rewards, loop=SimpleNamespace(metrics=(), tool_episodes=False), step=STEP, skips=skips)
    return ctx, rec


def test_a_resampled_row_gets_its_own_reward_and_rescored_logprobs(monkeypatch):
    ctx, rec = _context(monkeypatch, Intervention("gray", {"value": 128}))
    m = step_mod.train_step(ctx)
    batch = ctx.spec.seen[-1]
    assert [(s, g) for s, g in rec["rollouts"]] == [(["a", "b"], 0), (["c", "e"], 2)]  # c's group follows b's
    assert batch.texts == [t for _, t, _ in ROUND1 + ROUND2]
    assert batch.rewards.tolist() == pytest.approx(REWARDS)
    assert batch.components["acc"].tolist() == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert batch.groups["prompt"].tolist() == [0, 0, 1, 1, 2, 3]
    assert _close(batch.rescored["gray"], RESCORED)
    # round 2 builds and re-scores only the prompts of c and e; every call is seeded by the run seed and the step
    keys = [built[0] for built in rec["built"]]
    assert keys == [[("a", "original"), ("b", "original")], [("c", "original"), ("e", "original")]]
    assert all(b[1:] == ("the processor", "the data section", "gray", {"value": 128}, SEED * 1000003 + STEP)
               for b in rec["built"])
    rescoring, reference = ctx.backend.scores[:2], ctx.backend.scores[2]
    assert [len(items) for _, items, _ in rescoring] == [4, 2] and not any(ref for ref, _, _ in rescoring)
    for _, _, (inputs, ids) in ctx.backend.scores:  # the dummy item of an empty rank: the first row's own prompt
        assert inputs.sid == "a" and inputs.shift == 0.0 and ids.tolist() == [11, 12]
    # the trained rows (all but row 1) meet the passes with their own prompt (inputs_key re-based) and advantage
    trajs, inputs, adv, old, ref, fallback = rec["updates"][0]
    assert reference[0] and [t.text for t in trajs] == ["A", "A", "B", "A", "B"]
    assert [inputs[t.inputs_key].sid for t in trajs] == [t.sample_id for t in trajs] == ["a", "b", "b", "c", "e"]
    assert [i.sid for i, _ in reference[1]] == ["a", "b", "b", "c", "e"]
    assert adv.tolist() == pytest.approx([1.2, 1.3, 0.1, 1.1, 0.2]) and old is None
    assert _close(ref, [[-0.11, -0.12], [-0.21, -0.22, -0.23], [-0.24], [-0.31], [-0.42, -0.43]])
    assert fallback.text == "A" and fallback.sample_id == "a"
    # the merged step's bookkeeping: both rounds' times, prompts and skips
    assert m["resample_rounds"] == 1.0 and m["work/prompts"] == 4.0 and m["work/prompt_tokens"] == 10 + 20 + 10 + 20
    assert m["time/decode"] == 0.75 and m["time/views"] == 0.375 and m["response_len"] == pytest.approx(10 / 6)
    assert rec["skips"][-1] == ([("d", "bad video")], STEP + 1)


def test_feature_box_rescoring_of_a_resampled_round_is_nan_where_a_response_has_no_box(monkeypatch):
    seen = []

    def masked(model, scorer, items, boxes, calls):
        seen.append((model, [ids.tolist() for _, ids in items], boxes, calls))
        return [scorer([it])[0] if b is not None else None for it, b in zip(items, boxes)]

    monkeypatch.setattr(step_mod, "score_with_masked_boxes", masked)
    box = (0.0, 0.0, 0.5, 0.5)
    ctx, rec = _context(monkeypatch, Intervention("gray", {}, feature_box=lambda text: box if text == "A" else None))
    step_mod.train_step(ctx)
    batch = ctx.spec.seen[-1]
    assert [s[1:] for s in seen] == [([[11, 12], [13], [21, 22, 23], [24]], [box, None, box, None], 2),
                                     ([[31], [42, 43]], [box, None], 1)]
    assert seen[0][0] == "the model"
    assert [v for v, op in ctx.backend.reduced if op == "max"] == [[2], [1]]  # the call count every rank agrees on
    for row, expected in enumerate(RESCORED):
        got = batch.rescored["gray"][row]
        if batch.texts[row] == "A":
            assert got.tolist() == pytest.approx(expected, abs=1e-6), row
        else:  # no box: not scored, NaN at every token
            assert got.shape == (len(expected),) and torch.isnan(got).all(), row


def test_a_resampling_round_that_draws_nothing_on_this_rank_leaves_the_batch_as_it_was(monkeypatch):
    ctx, rec = _context(monkeypatch, Intervention("gray", {}), second=[])
    step_mod.train_step(ctx)
    batch = ctx.spec.seen[-1]
    assert batch.rewards.tolist() == pytest.approx(REWARDS[:4]) and batch.components["acc"].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert _close(batch.rescored["gray"], RESCORED[:4])
    assert [len(items) for ref, items, _ in ctx.backend.scores if not ref] == [4, 0]


def test_the_spec_bounds_the_resampling_rounds(monkeypatch):
    """A spec that always wants more prompts gets ``max_resample_rounds()`` rounds, then the batch is final."""
    ctx, rec = _context(monkeypatch, Intervention("gray", {}), rounds=1, always=True)
    m = step_mod.train_step(ctx)
    assert len(rec["rollouts"]) == 2 and m["resample_rounds"] == 1.0 and len(ctx.spec.seen[-1]) == 6
