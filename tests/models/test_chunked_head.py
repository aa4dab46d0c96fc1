"""The memory-bounded LM head (``mmrl.models.prefill.token_logprobs`` under ``head_logprobs``): chunked log-probs and
their gradients (hidden states and head weight) equal the one-shot head's, with or without a trained mask, at any
chunk size; the head never sees more than a chunk's rows, forward or backward; ``train.logprob_chunk_tokens`` is
checked before anything loads; at the real head's shape (Qwen2-VL-2B: 151,936 words, width 1536, tied) the chunked
log-probs and gradients equal the one-shot head's to float32 rounding."""
import pytest
import torch

from mmrl.config import TrainConfig, load_config
from mmrl.errors import ConfigError
from mmrl.models.prefill import CHUNK_TOKENS, head_logprobs, token_logprobs
from mmrl.validate import validate

N, R, H, V, PAD, TEMP = 3, 7, 5, 11, 0, 0.7
RLEN = torch.tensor([7, 4, 6])  # 17 real tokens


class Recording(torch.nn.Module):
    """A linear head that records the rows of every forward and of every gradient that reaches its output."""

    def __init__(self, linear):
        super().__init__()
        self.linear, self.forward_rows, self.backward_rows = linear, [], []

    def forward(self, h):
        self.forward_rows.append(h.shape[0])
        out = self.linear(h)
        if out.requires_grad:
            out.register_hook(lambda g: self.backward_rows.append(g.shape[0]))
        return out


def case(seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, R, H, generator=g, dtype=torch.float64)
    resp = [torch.randint(1, V, (int(n),), generator=g) for n in RLEN]
    head = torch.nn.Linear(H, V, bias=True).double()
    with torch.no_grad():
        head.weight.copy_(torch.randn(V, H, generator=g, dtype=torch.float64))
    trained = [torch.rand(int(n), generator=g) < 0.6 for n in RLEN]
    return hidden, resp, head, trained


def run(head, hidden, resp, trained, chunk):
    h = hidden.clone().requires_grad_(True)
    head.zero_grad()
    lps = head_logprobs(head, h, resp, RLEN, TEMP, PAD, trained, chunk_tokens=chunk)
    weights = torch.arange(1, sum(int(n) for n in RLEN) + 1, dtype=torch.float64)
    (torch.cat(lps) * weights).sum().backward()  # every token's gradient weighted differently
    linear = getattr(head, "linear", head)
    return torch.cat(lps).detach(), h.grad, linear.weight.grad.clone(), linear.bias.grad.clone()


@pytest.mark.parametrize("use_trained", [False, True])
@pytest.mark.parametrize("chunk", [1, 3, 4, 5, 17, 100])  # divides the token count (17 or the trained ones) or not
def test_chunked_log_probs_and_gradients_equal_the_one_shot_head(chunk, use_trained):
    hidden, resp, head, trained = case()
    trained = trained if use_trained else None
    want = run(head, hidden, resp, trained, 0)
    got = run(head, hidden, resp, trained, chunk)
    for a, b in zip(got, want):
        assert a.shape == b.shape and torch.allclose(a, b, rtol=0, atol=1e-6)
    assert want[0].abs().max() > 0.1 and want[2].abs().max() > 0.1  # a non-trivial case
    if use_trained:
        off = ~torch.cat(trained)
        assert off.any() and (got[0][off] == 0).all()


@pytest.mark.parametrize("chunk", [4, 5, 16])
def test_the_head_never_sees_more_than_a_chunk(chunk):
    hidden, resp, head, _ = case(1)
    rec = Recording(head)
    run(rec, hidden, resp, None, chunk)
    n_chunks = -(-17 // chunk)
    assert max(rec.forward_rows) <= chunk and max(rec.backward_rows) <= chunk
    assert len(rec.forward_rows) == 2 * n_chunks  # forward, then each chunk's recomputation in backward
    assert sorted(rec.backward_rows) == sorted(rec.forward_rows[:n_chunks])
    rec = Recording(head)
    run(rec, hidden, resp, None, 0)
    assert rec.forward_rows == [17] and rec.backward_rows == [17]  # the one-shot head: all rows at once


@pytest.mark.parametrize("chunk", [17, 100])
def test_rows_within_one_chunk_take_one_pass_without_recompute(chunk):
    """The bound already holds: the one-pass head, no checkpoint, the same floats as ``chunk_tokens=0``."""
    hidden, resp, head, _ = case(1)
    rec = Recording(head)
    got = run(rec, hidden, resp, None, chunk)
    want = run(head, hidden, resp, None, 0)
    assert rec.forward_rows == [17] and rec.backward_rows == [17]
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_without_grad_a_plain_loop_over_chunks():
    hidden, resp, head, _ = case(2)
    rec = Recording(head)
    with torch.no_grad():
        got = head_logprobs(rec, hidden, resp, RLEN, TEMP, PAD, chunk_tokens=5)
        want = head_logprobs(head, hidden, resp, RLEN, TEMP, PAD, chunk_tokens=0)
    assert rec.forward_rows == [5, 5, 5, 2] and rec.backward_rows == []
    assert all(torch.allclose(a, b, rtol=0, atol=1e-6) for a, b in zip(got, want))


def test_no_rows_still_call_the_head_once():
    """ZeRO-3 ranks must make the same module calls: a micro-batch without a trained token calls the head too."""
    rec = Recording(torch.nn.Linear(H, V))
    out = token_logprobs(rec, torch.zeros(0, H), torch.zeros(0, dtype=torch.long), TEMP, 4)
    assert rec.forward_rows == [0] and out.shape == (0,) and out.dtype == torch.float32


def test_a_tied_embedding_head_gets_the_same_gradient():
    """A head that shares its weight with the input embedding (``tie_word_embeddings``): the gradient of both uses
    adds up the same chunked or not."""
    g = torch.Generator().manual_seed(3)
    emb = torch.nn.Embedding(V, H).double()
    with torch.no_grad():
        emb.weight.copy_(torch.randn(V, H, generator=g, dtype=torch.float64))
    head = torch.nn.Linear(H, V, bias=False).double()
    head.weight = emb.weight
    ids = torch.randint(0, V, (N, R), generator=g)
    resp = [torch.randint(1, V, (int(n),), generator=g) for n in RLEN]
    grads = []
    for chunk in (0, 4):
        emb.zero_grad()
        torch.cat(head_logprobs(head, torch.tanh(emb(ids)), resp, RLEN, TEMP, PAD, chunk_tokens=chunk)).sum().backward()
        grads.append(emb.weight.grad.clone())
    assert torch.allclose(grads[0], grads[1], rtol=0, atol=1e-6) and grads[0].abs().max() > 0.1


def test_a_lora_wrapped_head_gets_the_same_adapter_gradient():
    peft = pytest.importorskip("peft")

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm_head = torch.nn.Linear(H, V, bias=False)

    hidden, resp, _, trained = case(4)
    torch.manual_seed(0)
    lora_cfg = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["lm_head"], init_lora_weights=False)
    model = peft.get_peft_model(M(), lora_cfg)
    model.double()
    head = model.base_model.model.lm_head
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    grads = []
    for chunk in (0, 3):
        model.zero_grad()
        torch.cat(head_logprobs(head, hidden, resp, RLEN, TEMP, PAD, trained, chunk_tokens=chunk)).sum().backward()
        grads.append([p.grad.clone() for p in lora])
    assert len(lora) == 2 and all(torch.allclose(a, b, rtol=0, atol=1e-6) for a, b in zip(*grads))
    assert all(g.abs().max() > 0 for g in grads[0])


def test_the_config_field_defaults_to_the_scorers_default_and_is_checked():
    assert TrainConfig().logprob_chunk_tokens == CHUNK_TOKENS
    assert load_config(None, ["train.logprob_chunk_tokens=0"], registries=False).train.logprob_chunk_tokens == 0
    with pytest.raises(ConfigError, match=r"config key 'train.logprob_chunk_tokens' must be >= 0 \(0 = off\), got -1"):
        validate(load_config(None, ["train.logprob_chunk_tokens=-1"], registries=False), data_paths=False,
                 registries=False)
    for bad in ("1.5", "abc"):
        with pytest.raises(ConfigError, match=r"config key 'train.logprob_chunk_tokens'.*Integer"):
            load_config(None, [f"train.logprob_chunk_tokens={bad}"], registries=False)


def test_every_scorer_entry_point_defaults_to_the_config_default():
    """A function that takes ``chunk_tokens`` defaults to ``CHUNK_TOKENS`` (``DeepSpeedBackend`` passes 0 under ZeRO-3
    itself): a caller that leaves it out gets the memory bound."""
    import inspect

    from mmrl.models import prefill, scoring, sequence_scoring
    from mmrl.train import deepspeed_backend

    found = {f"{m.__name__}.{n}": inspect.signature(f).parameters["chunk_tokens"].default
             for m in (prefill, scoring, sequence_scoring, deepspeed_backend)
             for n, f in inspect.getmembers(m, inspect.isfunction)
             if f.__module__ == m.__name__ and "chunk_tokens" in inspect.signature(f).parameters}
    assert "mmrl.train.deepspeed_backend.engine_logprobs" in found and len(found) >= 8, found
    assert {k: v for k, v in found.items() if v != CHUNK_TOKENS} == {}


@pytest.mark.parametrize("stage, want", [(0, 7), (2, 7), (3, 0)])
def test_zero3_scores_without_chunks(stage, want):
    """ZeRO-3 ranks gather the head's weights collectively at each head call, and a rank's chunk count follows its
    own tokens: under ZeRO-3 the head runs in one call; the other backends use the config's chunk."""
    from types import SimpleNamespace

    from mmrl.train.backend import Backend
    from mmrl.train.deepspeed_backend import DeepSpeedBackend

    cfg = SimpleNamespace(train=TrainConfig(logprob_chunk_tokens=7))
    be = DeepSpeedBackend.__new__(DeepSpeedBackend)
    be.cfg, be.stage = cfg, stage
    assert be.chunk_tokens() == want
    assert Backend(None, None, None, None, None, cfg, 0).chunk_tokens() == 7


# Qwen2-VL-2B's LM head (config.json: hidden_size 1536, vocab_size 151936, tie_word_embeddings true; the numbers of
# REAL["qwen2_vl_2b"] in tests/models/test_real_shapes.py, whose tests build whole models): 200 rows in chunks of 64,
# 64, 64 and a ragged 8
REAL_H, REAL_V, REAL_ROWS, REAL_CHUNK = 1536, 151936, 200, 64


@pytest.fixture(scope="module")
def real_head():
    """A bias-free ``nn.Linear`` head tied to an ``nn.Embedding`` ``[V, H]`` (init std 0.02, Qwen's
    ``initializer_range``), tokens to embed, a fixed mixing ``[H, H]`` and random targets."""
    g = torch.Generator().manual_seed(5)
    emb = torch.nn.Embedding(REAL_V, REAL_H, _weight=torch.randn(REAL_V, REAL_H, generator=g).mul_(0.02))
    head = torch.nn.Linear(REAL_H, REAL_V, bias=False)
    head.weight = emb.weight
    ids, targets = torch.randint(0, REAL_V, (2, REAL_ROWS), generator=g)
    return emb, head, ids, torch.randn(REAL_H, REAL_H, generator=g) / REAL_H ** 0.5, targets


def real_run(emb, head, ids, mix, targets, temperature, chunk):
    """Log-probs and the gradients w.r.t. the hidden rows and the (tied) head weight of a weighted sum of them. The
    rows are ``3 * rms_norm(emb(ids) @ mix)`` (a final norm's output: logits of std ~2.4; the mixing keeps a row from
    meeting its own embedding), so the weight's gradient adds the head's and the embedding's uses."""
    x = emb(ids) @ mix
    h = 3 * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    lp = token_logprobs(head, h, targets, temperature, chunk)
    grad_h, grad_w = torch.autograd.grad((lp * torch.linspace(0.5, 1.5, lp.shape[0])).sum(), [h, head.weight])
    return lp.detach(), grad_h, grad_w


@pytest.mark.slow  # 7 GEMMs of 200 x 1536 x 151,936: ~40 s on one core of a shared 2-core machine
@pytest.mark.parametrize("temperature", [0.7])  # T = 1 at the real vocabulary adds nothing T = 0.7 does not test
def test_at_the_real_vocabulary_chunks_equal_the_one_shot_head(real_head, temperature):
    """fp32 at 151,936 words: the chunked head's log-probs and gradients (hidden rows, tied weight) equal the one-shot
    head's within rtol 1e-5 (~80 float32 ulps) and atol 1e-7 * max|x|. Chunking changes only the row count of each
    GEMM (a kernel may block differently) and the order the weight gradient sums over rows (chunk by chunk): float32
    rounding, seen here at <= 5e-7 relative (log-probs and hidden gradients bit-equal on this CPU); atol covers weight
    entries that cancel to ~0. A wrong temperature moves log-probs by nats, a lost chunk changes the shape."""
    assert REAL_ROWS % REAL_CHUNK and REAL_ROWS > 2 * REAL_CHUNK  # several chunks, the last one ragged
    want = real_run(*real_head, temperature, 0)
    got = real_run(*real_head, temperature, REAL_CHUNK)
    for name, a, b in zip(("log-probs", "grad hidden", "grad weight"), got, want):
        assert a.shape == b.shape, (name, a.shape, b.shape)
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7 * float(b.abs().max())), (name, float((a - b).abs().max()))
    assert want[0].min() < -15 and want[0].max() > -12 and want[1].abs().max() > 0.05  # a non-trivial case
