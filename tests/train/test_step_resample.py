"""The step (``mmrl.train.step``), model-free, on a hand-built step with a resampling round: a second round's rows
get their rewards and their re-scored log-probs row for row with the merged batch, their prompt inputs re-based,
and only they are re-scored; the batch, the passes and the metrics of the merged step.

Round 1 draws samples a and b (responses interleaved: a, b, a, b) and skips x; the spec asks for more prompts,
round 2 draws c, e and g (one response each) and skips d. The fake scorer returns ``shift(inputs) - token_id / 100``
per token, where an intervened prompt of sample a, b, c, e, g has shift -1, -2, -3, -4, -5 and a plain prompt
shift 0, so every expected log-prob below is written out by hand from the rows' tokens. The clock is fake too."""
import json
from types import SimpleNamespace

import pytest
import torch

import mmrl.train.step as step_mod
from mmrl.algos.base import AdvantageOutput
from mmrl.algos.spec import Intervention, Needs, Selection
from mmrl.data.schema import Sample, Trajectory
from mmrl.errors import MMRLError
from mmrl.rollout.step_inputs import StepInputs
from mmrl.loss_params import RolloutCorrection

SHIFT = {"a": -1.0, "b": -2.0, "c": -3.0, "e": -4.0, "g": -5.0}
# (sample, text, response ids) of each round's rows, in the order the rollout returns them; "b" rows have view
# weight 2, the second "b" row is truncated; reward = 1 for the sample's answer "A" + 0.1 per token
ROUND1 = [("a", "A", [11, 12]), ("b", "A", [21, 22, 23]), ("a", "B", [13]), ("b", "B", [24])]
ROUND2 = [("c", "A", [31]), ("e", "B", [42, 43]), ("g", "A", [51])]
REWARDS = [1.2, 1.3, 0.1, 0.1, 1.1, 0.2, 1.1]
RESCORED = [[-1.11, -1.12], [-2.21, -2.22, -2.23], [-1.13], [-2.24], [-3.31], [-4.42, -4.43], [-5.51]]
SEED, STEP = 7, 3
CLOCK = [100.0, 102.0, 105.0, 109.0]  # t0, t1 (rollouts done), t2 (passes scored), t3 (updated)


def _close(rows, expected):
    return len(rows) == len(expected) and all(r.tolist() == pytest.approx(e, abs=1e-6) for r, e in zip(rows, expected))


def _rollout_of(rows, offset, skipped=(), time_decode=0.0):
    si = StepInputs(skipped=list(skipped), skipped_views=[("v", "blank", "unchanged")] * len(skipped),
                    time_decode=time_decode, time_views=time_decode / 2)
    for sid in dict.fromkeys(s for s, _, _ in rows):
        si.samples[sid] = Sample(sid, "q?", ["A", "B"], "A")
        si.candidates[(sid, "original")] = ["A", "B"]
        si.requests.append(SimpleNamespace(inputs=SimpleNamespace(sid=sid, shift=0.0, num_tokens=10 * len(si.requests) + 10)))
    keys, seen = {sid: i for i, sid in enumerate(si.samples)}, {}
    trajs = []
    for sid, text, ids in rows:
        seen[sid] = seen.get(sid, -1) + 1
        trajs.append(Trajectory(sample_id=sid, group_id=offset + keys[sid], view="original", role="anchor",
                                prompt_ids=torch.zeros(1, dtype=torch.long), response_ids=torch.tensor(ids),
                                logprobs=torch.full((len(ids),), -0.5), loss_mask=torch.ones(len(ids), dtype=torch.bool),
                                text=text, expected="A", inputs_key=keys[sid], pack_id=seen[sid],
                                view_weight=2.0 if sid == "b" else 1.0, truncated=(sid, text) == ("b", "B")))
    return si, trajs


class _Backend:
    rank, world_size, model = 0, 1, "the model"

    def __init__(self, n_global=None):
        self.scores, self.reduced, self.synced, self.n_global = [], [], [], n_global

    def all_reduce(self, values, op="sum"):
        self.reduced.append((list(values), op))
        out = [float(v) for v in values]
        return [float(self.n_global), *out[1:]] if self.n_global is not None and len(self.reduced) == 1 else out

    def gather(self, obj):
        return [obj]

    def is_main(self):
        return True

    def score(self, items, reference=False, fallback=None):
        self.scores.append((reference, items, fallback))
        return [torch.full((ids.numel(),), inputs.shift) - ids.float() / 100 for inputs, ids in items]

    def scheduler_step(self):
        pass

    def sync_rollout_weights(self, engine, everything=False):
        self.synced.append(engine)

    def lr(self):
        return 0.25


class _Spec:
    """Asks for ``resample`` more prompts once (or ``always``, at most ``rounds`` rounds), then trains every row but
    the third; shapes the logged reward (+1) and reports a metric from each hook."""

    def __init__(self, needs, rounds=2, always=False, resample=3, per_token=False):
        self._needs, self.rounds, self.always, self.resample = needs, rounds, always, resample
        self.per_token, self.seen, self.after = per_token, [], []

    def needs(self):
        return self._needs

    def max_resample_rounds(self):
        return self.rounds

    def advantages(self, batch):
        self.seen.append(batch)
        if self.per_token:  # each row's reward on its tokens, 9 on the padding; no shaped reward
            valid = torch.arange(int(batch.lengths.max()))[None, :] < batch.lengths[:, None]
            adv = torch.where(valid, batch.rewards[:, None], torch.tensor(9.0))
            return AdvantageOutput(advantages=adv, metrics={"out": 1.0})
        return AdvantageOutput(advantages=batch.rewards.clone(), rewards=batch.rewards + 1, metrics={"out": 1.0})

    def select(self, batch, out):
        assert out.metrics == {"out": 1.0}  # the advantages of this very batch
        if len(self.seen) == 1 or self.always:
            return Selection(train_mask=torch.ones(len(batch), dtype=torch.bool), resample=self.resample)
        mask = torch.ones(len(batch), dtype=torch.bool)
        mask[2] = False
        return Selection(train_mask=mask, metrics={"kept": float(mask.sum())})

    def after_step(self, batch, sel, epoch_ended):
        self.after.append((batch, sel, epoch_ended))
        return {"calls": float(len(self.after))}


def _rewards(si, trajs):
    if not trajs:  # as RLTrainer.rewards: no components at all
        return {}, torch.zeros(0)
    acc = [1.0 if t.text == si.samples[t.sample_id].answer else 0.0 for t in trajs]
    return {"acc": torch.tensor(acc)}, torch.tensor([a + 0.1 * t.response_ids.numel() for a, t in zip(acc, trajs)])


def _context(monkeypatch, intervention, first=ROUND1, second=ROUND2, algorithm=(("kl_coef", 0.05), ("ppo_epochs", 1),
                                                                                 ("rollout_correction", RolloutCorrection())),
             n_global=None, tmp_path=None, clock=CLOCK, **spec):
    rec = {"rollouts": [], "asked": [], "built": [], "updates": [], "skips": [], "loop": []}
    draws = iter([["a", "b"], ["c", "e", "g"], ["h"], ["i"]])
    stream = SimpleNamespace(epoch=0)

    def next_prompts(n):
        rec["asked"].append(n)
        stream.epoch = len(rec["asked"]) - 1  # the resampling round starts epoch 1
        return next(draws)

    stream.next = next_prompts
    def rollout(samples, group_offset=0):
        rec["rollouts"].append((samples, group_offset))
        if group_offset == 0:
            return _rollout_of(first, 0, skipped=[("x", "gone")], time_decode=0.25)
        return _rollout_of(second, group_offset, skipped=[("d", "bad video")], time_decode=0.5)

    def intervened(si, keys, processor, data_cfg, transform, params, seed):
        rec["built"].append((list(keys), processor, data_cfg, transform, params, seed))
        return {k: SimpleNamespace(sid=si.samples[k[0]].id, shift=SHIFT[k[0]]) for k in keys}

    def update(be, trajs, inputs, adv, cfg_algo, micro_batch, old, ref, fallback=None, correction=None):
        if correction is not None:  # the trainer's log-probs of every row, as the real update records them
            from mmrl.media.inputs import pad_right

            correction.micro_batch(list(range(len(trajs))), pad_right([t.logprobs.float() for t in trajs], 0.0),
                                   pad_right([t.loss_mask.float() for t in trajs], 0.0))
        rec["updates"].append(SimpleNamespace(be=be, trajs=trajs, inputs=inputs, adv=adv, cfg=cfg_algo,
                                              micro_batch=micro_batch, old=old, ref=ref, fallback=fallback))
        return {"loss": 0.5, "grad_norm": 2.0}

    ticks = iter(clock)
    monkeypatch.setattr(step_mod, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    monkeypatch.setattr(step_mod, "intervened_inputs", intervened)
    monkeypatch.setattr(step_mod, "policy_update", update)
    cfg = SimpleNamespace(train=SimpleNamespace(prompts_per_step=2, seed=SEED, micro_batch=4, out_dir=str(tmp_path)),
                          algorithm=SimpleNamespace(**dict(algorithm)), data="the data section")
    skips = SimpleNamespace(excluded=set())
    skips.add = lambda pairs, where, step: (rec["skips"].append((list(pairs), where, step)),
                                           skips.excluded.update(sid for sid, _ in pairs))
    loop = SimpleNamespace(metrics=(lambda trajs: rec["loop"].append(len(trajs)) or {"loop/rows": float(len(trajs))},),
                           tool_episodes=tmp_path is not None)
    tokenizer = SimpleNamespace(decode=lambda ids, *, skip_special_tokens: f"{list(ids)}:{skip_special_tokens}")
    ctx = step_mod.StepContext(
        cfg=cfg, backend=_Backend(n_global), spec=_Spec(Needs(rescore={"gray": intervention}), **spec), stream=stream,
        processor=SimpleNamespace(tokenizer=tokenizer), engine="the engine", rollout=rollout, rewards=_rewards,
        loop=loop, step=STEP, abstain_text="B", skips=skips)
    return ctx, rec


def test_a_resampled_row_gets_its_own_reward_and_rescored_logprobs(monkeypatch):
    ctx, rec = _context(monkeypatch, Intervention("gray", {"value": 128}))
    step_mod.train_step(ctx)
    batch = ctx.spec.seen[-1]
    assert rec["asked"] == [2, 3] and [g for _, g in rec["rollouts"]] == [0, 2]  # c's group follows b's
    assert batch.texts == [t for _, t, _ in ROUND1 + ROUND2]
    assert batch.rewards.tolist() == pytest.approx(REWARDS) and batch.rewards.dtype == torch.float32
    assert batch.components["acc"].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    assert set(batch.groups) == {"prompt", "pack"} and batch.groups["prompt"].tolist() == [0, 1, 0, 1, 2, 3, 4]
    assert batch.groups["pack"].tolist() == [0, 0, 1, 1, 0, 0, 0]
    assert _close(batch.rescored["gray"], RESCORED) and list(batch.rescored) == ["gray"]
    # round 2 builds and re-scores only the prompts of c, e and g; every call is seeded by the run seed and the step
    keys = [built[0] for built in rec["built"]]
    assert keys == [[("a", "original"), ("b", "original")], [("c", "original"), ("e", "original"), ("g", "original")]]
    assert all(b[1:] == (ctx.processor, "the data section", "gray", {"value": 128}, SEED * 1000003 + STEP)
               for b in rec["built"])
    rescoring, reference = ctx.backend.scores[:2], ctx.backend.scores[2]
    assert [len(items) for _, items, _ in rescoring] == [4, 3] and not any(ref for ref, _, _ in rescoring)
    for _, _, (inputs, ids) in ctx.backend.scores:  # the dummy item of an empty rank: the first row's own prompt
        assert inputs.sid == "a" and inputs.shift == 0.0 and ids.tolist() == [11, 12]
    # the trained rows (all but row 2) meet the passes with their own prompt (inputs_key re-based) and advantage
    up = rec["updates"][0]
    assert len(rec["updates"]) == 1 and up.be is ctx.backend and up.cfg is ctx.cfg.algorithm and up.micro_batch == 4
    assert reference[0] and [t.text for t in up.trajs] == ["A", "A", "B", "A", "B", "A"]
    assert [up.inputs[t.inputs_key].sid for t in up.trajs] == [t.sample_id for t in up.trajs] == list("abbceg")
    assert [i.sid for i, _ in reference[1]] == list("abbceg")
    assert up.adv.tolist() == pytest.approx([1.2, 1.3, 0.1, 1.1, 0.2, 1.1]) and up.old is None
    assert _close(up.ref, [[-0.11, -0.12], [-0.21, -0.22, -0.23], [-0.24], [-0.31], [-0.42, -0.43], [-0.51]])
    assert up.fallback.text == "A" and up.fallback.sample_id == "a"


def test_the_merged_batch_and_the_step_metrics(monkeypatch, tmp_path):
    ctx, rec = _context(monkeypatch, Intervention("gray", {}), tmp_path=tmp_path)
    ctx.backend.world_size = 2  # read as is (the fake gathers one part: this rank is the whole batch)
    m = step_mod.train_step(ctx)
    batch = ctx.spec.seen[-1]
    assert batch.roles == ["anchor"] * 7 and batch.views == ["original"] * 7
    assert batch.view_weights.tolist() == [1.0, 2.0, 1.0, 2.0, 1.0, 1.0, 1.0] and batch.view_weights.dtype == torch.float64
    assert [r.tolist() for r in batch.response_ids] == [ids for _, _, ids in ROUND1 + ROUND2]
    assert [lp.tolist() for lp in batch.logprobs] == [[-0.5] * len(ids) for _, _, ids in ROUND1 + ROUND2]
    assert batch.lengths.tolist() == [2, 3, 1, 1, 1, 2, 1]
    assert (batch.step, batch.epoch, batch.world_size, batch.target_groups) == (STEP, 1, 2, 2)
    assert batch.decode([5, 6]) == "[5, 6]:False"
    done, sel, epoch_ended = ctx.spec.after[0]
    assert done is batch and sel.metrics == {"kept": 6.0} and epoch_ended is True and len(ctx.spec.after) == 1
    assert ctx.backend.synced == ["the engine"] and rec["loop"] == [7]
    assert rec["skips"] == [([("x", "gone")], "rollout", STEP + 1), ([("x", "gone"), ("d", "bad video")], "rollout", STEP + 1)]
    logged = [json.loads(x) for x in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert [(r["group"], r["pack"], r["step"]) for r in logged] == [(0, 0, 4), (1, 0, 4), (0, 1, 4), (1, 1, 4),
                                                                   (2, 0, 4), (3, 0, 4), (4, 0, 4)]
    tokens = 11  # 2 + 3 + 1 + 1 + 1 + 2 + 1
    mean_reward = sum(REWARDS) / 7
    adv_std = (sum((r - mean_reward) ** 2 for r in REWARDS) / 6) ** 0.5
    expected = {
        "skipped_samples": 1.0, "skipped_total": 2.0, "resample_rounds": 1.0, "ranks": 2.0,
        "reward/acc": 4 / 7, "reward/total": mean_reward + 1,  # the spec's shaped reward
        "adv/mean": mean_reward, "adv/std": adv_std, "adv/zero_frac": 0.0, "loop/rows": 7.0,
        # view metrics over the merged rows: "A" is right on 4 of 7; "B" is the abstention option, chosen 3 times
        "view_acc/original": 4 / 7, "abstain_precision": 0.0, "abstain_recall": 0.0, "abstain_f1": 0.0,
        "n/abstain_expected": 0.0, "n/abstain_predicted": 3.0, "views_skipped": 2.0,
        "train_frac": 6 / 7, "entropy": 0.5, "response_len": tokens / 7, "truncated_frac": 1 / 7,
        "work/prompts": 5.0, "work/prompt_tokens": 10 + 20 + 10 + 20 + 30, "work/response_tokens": float(tokens),
        "tokens_per_s": tokens / 2.0, "lr": 0.25, "time/rollout": 2.0, "time/scoring": 3.0, "time/update": 4.0,
        "time/step": 9.0, "time/decode": 0.75, "time/views": 0.375, "view_time_share": 0.375 / 9.0,
        "loss": 0.5, "grad_norm": 2.0, "algo/out": 1.0, "algo/kept": 6.0, "algo/calls": 1.0,
    }
    # the sampler vs the trainer over the 6 trained rows (10 tokens: all but row 2's one): the stand-in update records
    # each row's own sampling log-probs as the trainer's, so every ratio is 1 and every weight 1 (token_truncate at 2)
    expected.update({"mismatch/tokens": float(tokens - 1), "mismatch/k3_kl": 0.0, "mismatch/max_abs_diff": 0.0,
                     "mismatch/mean_abs_diff": 0.0, "mismatch/ess": 1.0, "mismatch/seq_ratio_min": 1.0,
                     "mismatch/seq_ratio_max": 1.0, **{f"mismatch/ratio_p{q}": 1.0 for q in ("01", "05", "50", "95", "99")},
                     "rollout_corr/weight_mean": 1.0, "rollout_corr/weight_min": 1.0, "rollout_corr/weight_max": 1.0,
                     "rollout_corr/ess": 1.0, "rollout_corr/clipped_frac": 0.0, "rollout_corr/ratio_frac_high": 0.0,
                     "rollout_corr/ratio_frac_low": 0.0})
    assert m == pytest.approx(expected)


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
    assert [s[1:] for s in seen] == [([[11, 12], [21, 22, 23], [13], [24]], [box, box, None, None], 2),
                                     ([[31], [42, 43], [51]], [box, None, box], 2)]
    assert seen[0][0] == "the model"
    assert [v for v, op in ctx.backend.reduced if op == "max"] == [[2], [2]]  # the call count every rank agrees on
    for _, _, (inputs, ids) in ctx.backend.scores:
        assert inputs.sid == "a" and ids.tolist() == [11, 12]
    for row, expected in enumerate(RESCORED):
        got = batch.rescored["gray"][row]
        if batch.texts[row] == "A":
            assert got.tolist() == pytest.approx(expected, abs=1e-6), row
        else:  # no box: not scored, NaN at every token
            assert got.shape == (len(expected),) and torch.isnan(got).all(), row


def test_an_empty_resampling_round_leaves_the_batch_and_old_logprobs_come_without_a_reference(monkeypatch):
    """A rank may draw no prompt of a small resampling round; without a KL term there is no reference pass, and two
    PPO epochs score the old log-probs of the trained rows once."""
    ctx, rec = _context(monkeypatch, Intervention("gray", {}), second=[],
                        algorithm=(("kl_coef", 0.0), ("ppo_epochs", 2),
                                   ("rollout_correction", RolloutCorrection())), per_token=True)
    m = step_mod.train_step(ctx)
    batch = ctx.spec.seen[-1]
    assert batch.rewards.tolist() == pytest.approx(REWARDS[:4]) and batch.components["acc"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert _close(batch.rescored["gray"], RESCORED[:4]) and len(rec["built"]) == 1
    assert [(ref, len(items)) for ref, items, _ in ctx.backend.scores] == [(False, 4), (False, 0), (False, 3)]
    assert all(fb[0].sid == "a" and fb[1].tolist() == [11, 12] for _, _, fb in ctx.backend.scores)
    assert len(rec["updates"]) == 2 and all(u.ref is None for u in rec["updates"])
    assert _close(rec["updates"][0].old, [[-0.11, -0.12], [-0.21, -0.22, -0.23], [-0.24]])
    assert m["resample_rounds"] == 1.0 and m["work/prompts"] == 2.0
    # per-token advantages: statistics over the 7 real tokens (rewards 1.2 x 2, 1.3 x 3, 0.1, 0.1), not the padding
    assert m["adv/mean"] == pytest.approx((2 * 1.2 + 3 * 1.3 + 0.1 + 0.1) / 7)
    assert m["reward/total"] == pytest.approx(sum(REWARDS[:4]) / 4)  # no shaped reward: the batch's


@pytest.mark.parametrize("rounds", [1, 2])
def test_the_spec_bounds_the_resampling_rounds(monkeypatch, rounds):
    """A spec that always wants one more prompt gets ``max_resample_rounds()`` rounds, then the batch is final."""
    ctx, rec = _context(monkeypatch, Intervention("gray", {}), second=[("c", "A", [31])], rounds=rounds,
                        always=True, resample=1)
    m = step_mod.train_step(ctx)
    assert rec["asked"] == [2] + [1] * rounds and m["resample_rounds"] == float(rounds)
    assert len(ctx.spec.seen[-1]) == 4 + rounds


def test_a_one_row_step_without_resampling(monkeypatch):
    """One row of one token, a step under a second: the floors of the rates are 1 token and 1 ns, no more."""
    ctx, rec = _context(monkeypatch, Intervention("gray", {}), first=[("a", "A", [11])], rounds=0,
                        clock=[0.0, 0.5, 0.6, 0.8])
    m = step_mod.train_step(ctx)
    assert _close(ctx.spec.seen[-1].rescored["gray"], [[-1.11]]) and m["resample_rounds"] == 0.0
    assert m["entropy"] == 0.5 and m["tokens_per_s"] == pytest.approx(2.0)
    assert m["view_time_share"] == pytest.approx(0.125 / 0.8)


def test_a_step_whose_samples_were_all_skipped_returns_only_its_skips(monkeypatch):
    ctx, rec = _context(monkeypatch, Intervention("gray", {}), first=[])
    m = step_mod.train_step(ctx)
    assert m == {"skipped_samples": 1.0, "resample_rounds": 0.0, "ranks": 1.0, "skipped_total": 1.0, "time/step": 2.0}
    assert ctx.spec.seen == [] and rec["updates"] == []


def test_a_rank_without_trajectories_while_others_have_some_is_an_error(monkeypatch):
    ctx, _ = _context(monkeypatch, Intervention("gray", {}), first=[], n_global=5)
    with pytest.raises(MMRLError, match=r"^rank 0 has no trajectories at step 3 \(all its samples were skipped\) "
                                        r"while other ranks do; raise train.prompts_per_step or fix the data$"):
        step_mod.train_step(ctx)


def test_advantage_statistics_count_real_tokens_only():
    lengths = torch.tensor([2, 1])
    per_token = torch.tensor([[1.0, 2.0, 9.0], [0.0, 9.0, 9.0]])  # real tokens: 1, 2 and 0
    assert step_mod._adv_stats(per_token, lengths) == pytest.approx({"adv/mean": 1.0, "adv/std": 1.0,
                                                                     "adv/zero_frac": 1 / 3})
    assert step_mod._adv_stats(torch.tensor([0.5]), lengths[:1]) == {"adv/mean": 0.5, "adv/std": 0.0, "adv/zero_frac": 0.0}
    assert step_mod._adv_stats(torch.zeros(0), torch.zeros(0, dtype=torch.long)) == {"adv/mean": 0.0, "adv/std": 0.0,
                                                                                      "adv/zero_frac": 0.0}
    assert step_mod._adv_stats(torch.tensor([1e-9, 2e-8]), lengths)["adv/zero_frac"] == 0.5
    assert step_mod._adv_stats(torch.tensor([1e-8], dtype=torch.float64), lengths[:1])["adv/zero_frac"] == 0.0
    assert step_mod._adv_stats(torch.tensor([1.0, 3.0]), lengths)["adv/std"] == pytest.approx(2 ** 0.5)


def test_view_metrics_are_averaged_over_the_ranks_that_report_them():
    be = SimpleNamespace(gather=lambda obj: [{"a": 1.0, "b": 4.0}, {"a": 3.0}])
    assert step_mod._mean_over_ranks(be, {"ignored": 0.0}) == {"a": 2.0, "b": 4.0}
