"""FastRL in the real step: pruned rollouts enter no forward pass (old, reference, actor), the ARS count reaches the
rollout, and the spec's state survives a checkpoint."""
import pytest
import torch

from support import small_overrides
from mmrl.config import load_config

pytestmark = pytest.mark.slow


def _trainer(video_world, tiny_model_path, out, extra=()):
    from mmrl.train.rl_trainer import RLTrainer

    cfg = load_config(None, small_overrides(video_world, out, tiny_model_path)
                      + ["algorithm.name=fastrl", "algorithm.params={base: grpo, tau: 1.0, total_steps: 4}",
                         "train.steps=4", "rollout.max_new_tokens=4", *extra])
    return RLTrainer(cfg, quiet=True)


def test_pruned_rollouts_enter_no_forward_pass(video_world, tiny_model_path, tmp_path):
    tr = _trainer(video_world, tiny_model_path, tmp_path / "p", ["algorithm.kl_coef=0.05", "algorithm.ppo_epochs=2"])
    seen = {"train": [], "score": [], "sel": None}
    train_lp, score, select = tr.backend.train_logprobs, tr.backend.score, tr.spec.select

    def counted_train(items):
        seen["train"] += [r for _, r in items]
        return train_lp(items)

    def counted_score(items, reference=False, fallback=None):
        seen["score"].append((reference, [r for _, r in items]))
        return score(items, reference=reference, fallback=fallback)

    def recorded_select(batch, out):
        sel = select(batch, out)
        seen["sel"] = (batch, sel)
        return sel

    tr.backend.train_logprobs, tr.backend.score, tr.spec.select = counted_train, counted_score, recorded_select
    m = tr.train_step()
    batch, sel = seen["sel"]
    kept = [batch.response_ids[i] for i in sel.train_mask.nonzero().flatten().tolist()]
    assert 0 < len(kept) < len(batch)  # τ = 1: one rollout per (prompt, advantage) value, so some were pruned
    same = lambda a, b: len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))  # noqa: E731
    assert [ref for ref, _ in seen["score"]] == [True, False]  # the reference pass, then the old pass
    assert all(same(rows, kept) for _, rows in seen["score"])  # exactly the kept rows, in order
    assert same(seen["train"], kept + kept)  # two PPO epochs over the kept rows only
    assert m["algo/fastrl/kept_frac"] == pytest.approx(len(kept) / len(batch))
    assert m["train_frac"] == pytest.approx(len(kept) / len(batch))


def test_ars_count_reaches_the_rollout_and_survives_a_checkpoint(video_world, tiny_model_path, tmp_path):
    tr = _trainer(video_world, tiny_model_path, tmp_path / "a")
    tr.spec.plan("anchor", tr.cfg.rollout.n)  # starts ARS with G = rollout.n = 4
    tr.spec.ars_state.n, tr.spec.ars_state.g_ref = 2, 3.0  # as if two epochs had shrunk the count
    si, trajs = tr.rollout(tr.stream.next(3))
    assert [r.n for r in si.requests] == [2, 2, 2] and len(trajs) == 6
    tr.train_step()
    tr.save()
    tr2 = _trainer(video_world, tiny_model_path, tmp_path / "a")
    assert tr2.resume()
    assert tr2.spec.ars_state.state_dict() == tr.spec.ars_state.state_dict()
    assert tr2.plan("anchor") == 2
