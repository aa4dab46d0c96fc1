"""The policy update on hand values and against one big batch (``mmrl/train/update.py``).

The scorer is a bigram table (``update_support``), so every test runs the real micro-batching, shares, KL term,
clipping and optimizer step in milliseconds.
"""
import math

import pytest
import torch

from mmrl.algos.base import POLICY_LOSSES
from mmrl.algos.losses import AGG_MODES
from mmrl.train.update import batch_share, is_seq_mode, micro_batch_loss
from tests.train.update_support import Bigram, algo, make_batch, perturbed, reference_grad, run_update

LN2 = math.log(2.0)

# ---- micro_batch_loss: policy loss + kl_coef * k3 on hand values ----------------------------------------------


def _hand_batch():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], dtype=torch.float64, requires_grad=True)
    ref = logp.detach() + torch.tensor([[0.0, LN2], [-LN2, 0.0]], dtype=torch.float64)  # x = ref - logp
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    return logp, ref, mask, adv


# k3 = e^x - x - 1: x = 0 -> 0, x = ln2 -> 1 - ln2, x = -ln2 -> ln2 - 1/2
K3 = {"token-mean": ((1 - LN2) + (LN2 - 0.5)) / 3,
      "seq-mean-token-mean": ((1 - LN2) / 2 + (LN2 - 0.5)) / 2,
      "seq-mean-token-sum": ((1 - LN2) + (LN2 - 0.5)) / 2,
      "seq-mean-token-sum-norm": ((1 - LN2) + (LN2 - 0.5)) / (2 * 4)}  # N = 2 rows, max_len = 4
# ratio = 1 (old = None): the PPO loss is agg(-A)
POLICY = {"token-mean": (-1 - 1 + 2) / 3, "seq-mean-token-mean": (-1 + 2) / 2, "seq-mean-token-sum": (-2 + 2) / 2,
          "seq-mean-token-sum-norm": (-2 + 2) / 8}


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("coef", [0.0, 0.25, 2.0])
def test_loss_is_policy_loss_plus_coef_times_k3(agg, coef):
    logp, ref, mask, adv = _hand_batch()
    cfg = algo(agg=agg, kl_coef=coef, max_len=4)
    loss, kl, _ = micro_batch_loss(POLICY_LOSSES.get("ppo"), logp, mask, adv, None, ref, cfg)
    assert float(kl.detach()) == pytest.approx(K3[agg] if coef > 0 else 0.0, abs=1e-12)
    assert float(loss.detach()) == pytest.approx(POLICY[agg] + coef * K3[agg], abs=1e-12)


def test_kl_gradient_on_hand_values():
    """d/dlogp of coef * token-mean k3 = coef * (1 - e^x) / n_tokens (x = ref - logp); ratio = 1 adds -A / n."""
    logp, ref, mask, adv = _hand_batch()
    loss, _, _ = micro_batch_loss(POLICY_LOSSES.get("ppo"), logp, mask, adv, None, ref, algo(kl_coef=0.5))
    loss.backward()
    x = (ref - logp).detach()
    expect = (0.5 * (1 - torch.exp(x)) - adv[:, None]) / 3 * mask
    assert torch.allclose(logp.grad, expect, atol=1e-12)


def test_no_reference_or_zero_coef_adds_nothing():
    logp, ref, mask, adv = _hand_batch()
    fn = POLICY_LOSSES.get("ppo")
    base, kl0, _ = micro_batch_loss(fn, logp, mask, adv, None, None, algo(kl_coef=0.5))
    assert float(kl0) == 0.0 and float(base.detach()) == pytest.approx(POLICY["token-mean"])
    zero, _, _ = micro_batch_loss(fn, logp, mask, adv, None, ref, algo(kl_coef=0.0))
    assert float(zero) == float(base)


def test_old_logps_set_the_ratio():
    """old = logp - ln2 on every token: ratio 2, clipped to 1.2 where A > 0 (binding), kept where A < 0."""
    logp, _, mask, adv = _hand_batch()
    old = logp.detach() - LN2
    loss, _, m = micro_batch_loss(POLICY_LOSSES.get("ppo"), logp, mask, adv, old, None, algo())
    # row 0 (A=1): -min(2, 1.2) = -1.2 per token; row 1 (A=-2): -min(-4, -2.4) = 4
    assert float(loss) == pytest.approx((-1.2 - 1.2 + 4.0) / 3)
    assert m["clip_frac"] == pytest.approx(2 / 3) and m["ratio_mean"] == pytest.approx(2.0)


# ---- batch_share ------------------------------------------------------------------------------------------------

SHARE_CASES = [
    # mask, seq_mode, total_rows, total_tokens, share
    ([[1, 1, 0], [0, 0, 0], [1, 0, 0]], True, 4, 10, 2 / 4),  # rows with a trained token
    ([[1, 1, 0], [0, 0, 0], [1, 0, 0]], False, 4, 10, 3 / 10),  # trained tokens
    ([[0, 0]], True, 3, 5, 0.0),
    ([[0, 0]], False, 3, 5, 0.0),
    ([[1, 1]], True, 1, 2, 1.0),
    ([[1, 1]], False, 1, 2, 1.0),
    ([[0]], True, 0, 0, 0.0),  # nothing trained anywhere: no division by zero
    ([[1, 0]], False, 1, 1, 1.0),  # one trained token in the whole batch
    ([[0, 1]], True, 1, 1, 1.0),
]


@pytest.mark.parametrize("mask,seq_mode,rows,tokens,share", SHARE_CASES)
def test_batch_share(mask, seq_mode, rows, tokens, share):
    assert batch_share(torch.tensor(mask, dtype=torch.float32), seq_mode, rows, tokens) == pytest.approx(share)


@pytest.mark.parametrize("loss,agg,gspo_agg,seq", [("ppo", "token-mean", "seq-mean-token-mean", False),
                                                    ("ppo", "seq-mean-token-mean", "token-mean", True),
                                                    ("ppo", "seq-mean-token-sum-norm", "token-mean", True),
                                                    ("gspo", "token-mean", "seq-mean-token-mean", True),
                                                    ("gspo_token", "seq-mean-token-mean", "token-mean", False)])
def test_is_seq_mode_reads_the_losss_own_aggregation(loss, agg, gspo_agg, seq):
    cfg = algo(loss="ppo", agg=agg)
    cfg.loss, cfg.gspo_loss_agg = loss, gspo_agg
    assert is_seq_mode(cfg) is seq


# ---- policy_update: micro-batching gives the big batch's gradient -----------------------------------------------

# six responses of 1..5 tokens; row 2 has no trained token (all masked), row 4 has a masked tool span
MASKS = [[1, 1, 1], [1], [0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 1], [1, 1]]
SEQ_MODES_WITH_EMPTY_ROW_SKIPPED = ("seq-mean-token-mean", "seq-mean-token-sum")


def _case(agg, loss="ppo", kl_coef=0.1, masks=MASKS):
    model = Bigram()
    trajs, inputs, adv = make_batch(masks)
    old = perturbed(model, trajs, inputs, 0.3, seed=2)
    ref = perturbed(model, trajs, inputs, 0.5, seed=3)
    return model, trajs, inputs, adv, old, ref, algo(loss=loss, agg=agg, kl_coef=kl_coef)


@pytest.mark.parametrize("micro_batch", [1, 2, 4, 6])
@pytest.mark.parametrize("agg", [a for a in AGG_MODES if a != "seq-mean-token-sum-norm"])
def test_micro_batches_give_the_big_batch_gradient_with_an_empty_row(monkeypatch, agg, micro_batch):
    model, trajs, inputs, adv, old, ref, cfg = _case(agg)
    loss, g_ref = reference_grad(model, trajs, inputs, adv, cfg, old, ref)
    stats, g = run_update(monkeypatch, model, trajs, inputs, adv, cfg, micro_batch, old=old, ref=ref)
    assert torch.allclose(g, g_ref, rtol=1e-5, atol=1e-7), (agg, micro_batch)
    assert stats["loss"] == pytest.approx(loss, rel=1e-5, abs=1e-7)
    assert stats["grad_norm"] == pytest.approx(float(g_ref.norm()), rel=1e-5)


@pytest.mark.parametrize("micro_batch", [1, 2, 4, 6])
def test_drgrpo_norm_micro_batches_without_an_empty_row(monkeypatch, micro_batch):
    masks = [m for m in MASKS if any(m)]
    model, trajs, inputs, adv, old, ref, cfg = _case("seq-mean-token-sum-norm", masks=masks)
    loss, g_ref = reference_grad(model, trajs, inputs, adv, cfg, old, ref)
    stats, g = run_update(monkeypatch, model, trajs, inputs, adv, cfg, micro_batch, old=old, ref=ref)
    assert torch.allclose(g, g_ref, rtol=1e-5, atol=1e-7)
    assert stats["loss"] == pytest.approx(loss, rel=1e-5, abs=1e-7)


def test_drgrpo_norm_micro_batches_with_an_empty_row(monkeypatch):
    """Dr.GRPO's normaliser N x L_max counts every row, trained or not: micro-batch shares are rows / N (was a 1.2x
    gradient with one all-masked row among 6 when micro_batch < N)."""
    model, trajs, inputs, adv, old, ref, cfg = _case("seq-mean-token-sum-norm")
    _, g_ref = reference_grad(model, trajs, inputs, adv, cfg, old, ref)
    _, g = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 1, old=old, ref=ref)
    assert torch.allclose(g, g_ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("micro_batch", [1, 2, 4, 6])
@pytest.mark.parametrize("loss", ["gspo", "gspo_token"])
def test_gspo_micro_batches_give_the_big_batch_gradient(monkeypatch, loss, micro_batch):
    model, trajs, inputs, adv, old, ref, cfg = _case("seq-mean-token-mean", loss=loss)
    _, g_ref = reference_grad(model, trajs, inputs, adv, cfg, old, ref)
    _, g = run_update(monkeypatch, model, trajs, inputs, adv, cfg, micro_batch, old=old, ref=ref)
    assert torch.allclose(g, g_ref, rtol=1e-5, atol=1e-7)


def test_empty_row_changes_nothing_in_seq_mean(monkeypatch):
    """Removing the all-masked row leaves the seq-mean gradient unchanged (it is not in the denominator)."""
    for agg in SEQ_MODES_WITH_EMPTY_ROW_SKIPPED:
        model, trajs, inputs, adv, old, ref, cfg = _case(agg)
        _, g = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 1, old=old, ref=ref)
        keep = [i for i, t in enumerate(trajs) if bool(t.loss_mask.any())]
        _, g2 = run_update(monkeypatch, model, [trajs[i] for i in keep], inputs, adv[keep], cfg, 1,
                           old=[old[i] for i in keep], ref=[ref[i] for i in keep])
        assert torch.allclose(g, g2, rtol=1e-6, atol=1e-9), agg


def test_kl_enters_the_update_gradient(monkeypatch):
    model, trajs, inputs, adv, old, ref, cfg = _case("token-mean", kl_coef=0.0)
    _, g0 = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 2, old=old, ref=ref)
    cfg.kl_coef = 1.0
    _, g1 = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 2, old=old, ref=ref)
    _, g_ref = reference_grad(model, trajs, inputs, adv, cfg, old, ref)
    assert not torch.allclose(g0, g1) and torch.allclose(g1, g_ref, rtol=1e-5, atol=1e-7)


def test_temperature_reaches_the_scorer(monkeypatch):
    model, trajs, inputs, adv, old, ref, cfg = _case("token-mean")
    _, g = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 3, old=old, ref=ref, temperature=0.7)
    _, g_ref = reference_grad(model, trajs, inputs, adv, cfg, old, ref, temperature=0.7)
    assert torch.allclose(g, g_ref, rtol=1e-5, atol=1e-7)


# ---- clipping and the step ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("factor", [0.25, 0.9])
def test_grad_norm_is_reported_before_clipping_and_clipped_to_the_limit(monkeypatch, factor):
    model, trajs, inputs, adv, old, ref, cfg = _case("token-mean")
    _, g_ref = reference_grad(model, trajs, inputs, adv, cfg, old, ref)
    norm = float(g_ref.norm())
    w0 = model.w.detach().clone()
    stats, g = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 2, grad_clip=factor * norm, lr=1.0,
                          old=old, ref=ref)
    assert stats["grad_norm"] == pytest.approx(norm, rel=1e-5)
    assert float(g.norm()) == pytest.approx(factor * norm, rel=1e-4)
    assert torch.allclose(g, g_ref * factor, rtol=1e-4, atol=1e-8)  # same direction
    assert torch.allclose(model.w.detach(), w0 - g, atol=1e-12)  # SGD(lr=1) stepped on the clipped gradient


@pytest.mark.parametrize("grad_clip", [0.0, 1e6])
def test_no_clipping_when_off_or_above_the_norm(monkeypatch, grad_clip):
    model, trajs, inputs, adv, old, ref, cfg = _case("token-mean")
    _, g_ref = reference_grad(model, trajs, inputs, adv, cfg, old, ref)
    stats, g = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 2, grad_clip=grad_clip, old=old, ref=ref)
    assert torch.allclose(g, g_ref, rtol=1e-5, atol=1e-7)


def test_update_starts_from_zero_gradients(monkeypatch):
    """A stale gradient left on the parameters does not leak into the step."""
    model, trajs, inputs, adv, old, ref, cfg = _case("token-mean")
    _, g_ref = reference_grad(model, trajs, inputs, adv, cfg, old, ref)
    model.w.grad = torch.full_like(model.w, 100.0)
    _, g = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 2, old=old, ref=ref)
    assert torch.allclose(g, g_ref, rtol=1e-5, atol=1e-7)


def test_stats_are_share_weighted_means(monkeypatch):
    """Ratio = 1 without old log-probs; kl and clip_frac are the batch's own (token-mean) values."""
    model, trajs, inputs, adv, old, ref, cfg = _case("token-mean", kl_coef=0.2)
    stats, _ = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 2, ref=ref)
    assert stats["ratio_mean"] == pytest.approx(1.0) and stats["clip_frac"] == 0.0
    from mmrl.algos.losses import aggregate, k3_kl
    from mmrl.media.inputs import pad_right
    from tests.train.update_support import bigram_logprobs

    with torch.no_grad():
        lp = pad_right(bigram_logprobs(model, [(inputs[t.inputs_key], t.response_ids) for t in trajs]), 0.0)
    mask = pad_right([t.loss_mask.float() for t in trajs], 0.0)
    kl = float(aggregate(k3_kl(lp, pad_right(ref, 0.0)), mask, "token-mean"))
    assert stats["kl"] == pytest.approx(kl, rel=1e-5)
    assert set(stats) == {"loss", "kl", "clip_frac", "ratio_mean", "grad_norm"}


def test_stats_clip_frac_and_ratio_are_the_batch_token_means(monkeypatch):
    """With old log-probs (ratio != 1) the logged clip fraction and mean ratio over micro-batches equal the
    whole batch's token-mean metrics (token shares)."""
    model, trajs, inputs, adv, old, ref, cfg = _case("token-mean")
    old = [o - 0.4 * (i % 2) + 0.3 * (i % 3 == 0) for i, o in enumerate(old)]  # ratios well outside 1 +- 0.2
    stats, _ = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 2, old=old, ref=ref)
    from mmrl.media.inputs import pad_right
    from tests.train.update_support import bigram_logprobs

    with torch.no_grad():
        lp = pad_right(bigram_logprobs(model, [(inputs[t.inputs_key], t.response_ids) for t in trajs]), 0.0)
    mask = pad_right([t.loss_mask.float() for t in trajs], 0.0)
    _, m = POLICY_LOSSES.get("ppo")(lp, pad_right(old, 0.0), adv, mask, cfg)
    assert 0.0 < m["clip_frac"] < 1.0 and m["ratio_mean"] != pytest.approx(1.0)
    assert stats["clip_frac"] == pytest.approx(m["clip_frac"], rel=1e-5)
    assert stats["ratio_mean"] == pytest.approx(m["ratio_mean"], rel=1e-5)


def test_a_loss_without_metrics_logs_no_clipping_and_ratio_one(monkeypatch):
    from mmrl.algos.losses import aggregate

    name = "t_plain_pg"
    if name not in POLICY_LOSSES:
        POLICY_LOSSES.register(name)(lambda logp, old, adv, mask, cfg: (aggregate(-adv[:, None] * logp, mask), {}))
    model, trajs, inputs, adv, old, ref, cfg = _case("token-mean", loss=name)
    stats, _ = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 2, old=old)
    assert stats["clip_frac"] == 0.0 and stats["ratio_mean"] == pytest.approx(1.0)


def test_no_reference_log_probs_means_no_kl_even_with_a_coefficient(monkeypatch):
    model, trajs, inputs, adv, old, ref, cfg = _case("seq-mean-token-mean", kl_coef=0.5)
    _, g_ref = reference_grad(model, trajs, inputs, adv, cfg, old, None)
    stats, g = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 2, old=old, ref=None)
    assert stats["kl"] == 0.0 and torch.allclose(g, g_ref, rtol=1e-5, atol=1e-7)


def test_scorer_gets_the_micro_batch_and_pad_id_and_runs_under_autocast(monkeypatch):
    from mmrl.train import backend, update
    from tests.train.update_support import bigram_logprobs, make_backend

    calls, entered = [], []

    def scorer(model, items, temperature=1.0, micro_batch=16, pad_id=0, chunk_tokens=-1):
        calls.append((len(items), micro_batch, pad_id, temperature, bool(entered), chunk_tokens))
        return bigram_logprobs(model, items, temperature)

    class Autocast:
        def __enter__(self):
            entered.append(True)

        def __exit__(self, *a):
            entered.clear()

    model, trajs, inputs, adv, old, ref, cfg = _case("token-mean")
    be = make_backend(monkeypatch, model, 4, temperature=0.9, pad_id=5, autocast=Autocast)
    be.cfg.train.logprob_chunk_tokens = 7
    monkeypatch.setattr(backend, "response_logprobs", scorer)
    update.policy_update(be, trajs, inputs, adv, cfg, 4, old, ref)
    be.score([(inputs[trajs[0].inputs_key], trajs[0].response_ids)])
    assert calls == [(4, 4, 5, 0.9, True, 7), (2, 2, 5, 0.9, True, 7), (1, 4, 5, 0.9, True, 7)]


def test_a_rank_with_fewer_micro_batches_runs_zero_weight_passes(monkeypatch):
    """Two ranks, the other one with nothing to train and one more micro-batch: this rank runs a zero-share pass
    on ``fallback`` (ZeRO needs the same number of backward passes everywhere), and its gradient is W = 2 times
    its own batch's (data parallelism averages over ranks)."""
    from mmrl.train import backend, update
    from tests.train.update_support import make_backend

    passes = []

    class OtherRankIsEmpty(backend.Backend):
        world_size = 2

        def all_reduce(self, values, op="sum"):
            return [float(v) + (1 if op == "max" else 0) for v in values]

        def backward(self, loss, last):
            passes.append(last)
            super().backward(loss, last)

    model, trajs, inputs, adv, old, ref, cfg = _case("seq-mean-token-mean")
    _, g_ref = reference_grad(model, trajs, inputs, adv, cfg, old, ref)
    alone, _ = run_update(monkeypatch, model, trajs, inputs, adv, cfg, 3, old=old, ref=ref)
    be = make_backend(monkeypatch, model, 3, cls=OtherRankIsEmpty)
    stats = update.policy_update(be, trajs, inputs, adv, cfg, 3, old, ref, fallback=None)
    assert passes == [False, False, True]  # 2 real micro-batches + 1 zero-weight pass, the last one flagged
    assert torch.allclose(model.w.grad, 2 * g_ref, rtol=1e-5, atol=1e-7)
    assert stats["grad_norm"] == pytest.approx(2 * float(g_ref.norm()), rel=1e-5)
    for k in ("loss", "kl", "clip_frac", "ratio_mean"):  # the zero-weight pass adds nothing to the stats either
        assert stats[k] == pytest.approx(alone[k], rel=1e-6, abs=1e-9), k
    passes.clear()  # a rank with a single trajectory, and one with none (it trains on ``fallback``)
    stats = update.policy_update(be, trajs[:1], inputs, adv[:1], cfg, 3, old[:1], ref[:1], fallback=None)
    assert passes == [False, True]
    passes.clear()
    stats = update.policy_update(be, [], inputs, adv[:0], cfg, 3, None, None, fallback=trajs[1])
    assert passes == [True] and float(model.w.grad.abs().sum()) == 0.0 and stats["ratio_mean"] == 0.0


@pytest.mark.parametrize("width", [2, 3, 5])
def test_token_advantages_are_cut_or_zero_padded_to_the_micro_batch(width):
    """``adv [n, T']`` against log-probs ``[n, 3]``: the first 3 columns, zeros past T' (masked tokens anyway)."""
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.5, -2.5]], dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 3, dtype=torch.float64)
    adv = torch.arange(1.0, 1.0 + 2 * width, dtype=torch.float64).view(2, width)
    full = torch.zeros(2, 3, dtype=torch.float64)
    full[:, :min(3, width)] = adv[:, :3]
    fn = POLICY_LOSSES.get("ppo")
    loss, _, _ = micro_batch_loss(fn, logp, mask, adv, None, None, algo())
    want, _, _ = micro_batch_loss(fn, logp, mask, full, None, None, algo())
    assert float(loss.detach()) == pytest.approx(float(want.detach())) == pytest.approx(float(-full.sum() / 6))
