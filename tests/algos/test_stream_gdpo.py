"""Stream-GDPO (specs/algorithms.md §5): the spec's vectors through the registered spec, zero-variance components,
batch renormalisation as an option, config errors, and the action-branch loss weight reaching the policy loss."""
import re

import pytest
import torch

from mmrl.algos.base import LossParams
from mmrl.algos.spec import StepBatch, build_spec
from mmrl.algos.stream_gdpo import action_token_mask, stream_gdpo_advantages
from mmrl.errors import ConfigError
from mmrl.train.update import micro_batch_loss
from mmrl.algos.base import POLICY_LOSSES

R = {"out": [1.0, 0.5, 0.5, 0.0], "fmt": [1.0, 1.0, 1.0, 0.0], "tool": [1.0, 0.0, 0.0, 0.0], "mem": [0.2, 0.1, 0.0, -0.1]}
VECTOR = [3.055, 0.443, 0.056, -3.555]


def _batch(comps, groups=None, ids=None, decode=None):
    n = len(next(iter(comps.values())))
    tens = {f"stream_{k}": torch.tensor(v) for k, v in comps.items()}
    ids = ids or [torch.tensor([0, 1, 2])] * n
    return StepBatch(rewards=sum(tens.values()), components=tens,
                     groups={"prompt": torch.tensor(groups or [0] * n), "pack": torch.zeros(n, dtype=torch.long)},
                     roles=["anchor"] * n, views=["original"] * n,
                     lengths=torch.tensor([int(x.numel()) for x in ids]), response_ids=ids, decode=decode)


def test_spec_vector_2_through_the_registered_spec():
    out = build_spec("stream_gdpo", {}, LossParams()).advantages(_batch(R))
    assert out.advantages.shape == (4,)
    assert torch.allclose(out.advantages, torch.tensor(VECTOR), atol=1e-3)
    assert torch.allclose(stream_gdpo_advantages({k: torch.tensor(v) for k, v in R.items()}, torch.zeros(4, dtype=torch.long)),
                          torch.tensor(VECTOR), atol=1e-3)


def test_zero_variance_component_contributes_zero():
    spec = build_spec("stream_gdpo", {}, LossParams())
    flat_tool = dict(R, tool=[1.0, 1.0, 1.0, 1.0])
    no_tool = build_spec("stream_gdpo", {"weights": {"tool": 0.0}}, LossParams())  # a zero weight drops the role
    a = spec.advantages(_batch(flat_tool)).advantages
    b = no_tool.advantages(_batch({k: v for k, v in R.items() if k != "tool"})).advantages
    assert torch.equal(a, b)
    assert torch.equal(spec.advantages(_batch({k: [0.5] * 4 for k in R})).advantages, torch.zeros(4))


def test_groups_and_batch_norm_option():
    two = {k: v + v[::-1] for k, v in R.items()}
    spec = build_spec("stream_gdpo", {}, LossParams())
    a = spec.advantages(_batch(two, groups=[3, 3, 3, 3, 1, 1, 1, 1])).advantages
    assert torch.allclose(a[:4], torch.tensor(VECTOR), atol=1e-3)
    assert torch.allclose(a[4:], torch.tensor(VECTOR[::-1]), atol=1e-3)
    bn = build_spec("stream_gdpo", {"batch_norm": True}, LossParams()).advantages(_batch(R)).advantages
    pre = torch.tensor(VECTOR, dtype=torch.float64)
    assert torch.allclose(bn.double(), (pre - pre.mean()) / (pre.std() + 1e-4), atol=1e-3)
    assert not torch.allclose(bn, a[:4], atol=1e-2)  # off by default: the option changes the advantage


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"algorithm.params.weights.speed"):
        build_spec("stream_gdpo", {"weights": {"speed": 1.0}}, LossParams())
    with pytest.raises(ConfigError, match=r"algorithm.params.action_loss_weight"):
        build_spec("stream_gdpo", {"action_loss_weight": 0.0}, LossParams())
    with pytest.raises(ConfigError, match=r"algorithm.params.components.out.*stream_out"):
        build_spec("stream_gdpo", {}, LossParams()).advantages(_batch({"fmt": [1.0, 0.0]}))
    with pytest.raises(ConfigError, match=r"algorithm.params.nope"):
        build_spec("stream_gdpo", {"nope": 1}, LossParams())
    with pytest.raises(ConfigError, match=r"algorithm.params.action_pattern"):
        build_spec("stream_gdpo", {"action_pattern": "(<action>"}, LossParams())


# ---- action-branch loss weight --------------------------------------------------------------------------------------
VOCAB = ["<think>", "look", "</think>", "<action>", "silence", "</action>", "<|im_end|>", "\nobs action x"]
SPANS = lambda text: [m.span() for m in re.finditer(r"<action>.*?</action>", text)]  # noqa: E731
decode = lambda ids: "".join(VOCAB[i] for i in ids)  # noqa: E731


def test_default_pattern_finds_the_grammar_action():
    from mmrl.stream.actions import recall

    text = recall(1, 2.5, think="look back").render()  # the grammar's canonical text
    spans = build_spec("stream_gdpo", {}, LossParams()).find_spans(text)
    assert [text[a:b] for a, b in spans] == ["<action>recall(1, 2.5)</action>"]


def test_action_token_mask_per_turn():
    ids = [0, 1, 2, 3, 4, 5, 6, 7, 6, 3, 4, 5]
    m = action_token_mask(ids, decode, SPANS)
    assert m.tolist() == [False, False, False, True, True, True, False, False, False, True, True, True]


def test_action_loss_weight_scales_the_policy_loss_of_action_tokens():
    ids = [torch.tensor([0, 1, 2, 3, 4, 5]), torch.tensor([0, 2, 3, 4, 5, 6])]
    comps = {"out": [1.0, 0.0], "fmt": [1.0, 1.0], "tool": [0.0, 0.0], "mem": [0.0, 0.0]}
    batch = _batch(comps, ids=ids, decode=decode)
    plain = build_spec("stream_gdpo", {}, LossParams()).advantages(batch).advantages
    spec = build_spec("stream_gdpo", {"action_loss_weight": 0.15}, LossParams())  # default pattern: <action>...</action>
    tok = spec.advantages(batch).advantages
    assert tok.shape == (2, 6)
    act = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 0]], dtype=torch.bool)
    assert torch.allclose(tok[~act], plain[:, None].expand(2, 6)[~act])
    assert torch.allclose(tok[act], 0.15 * plain[:, None].expand(2, 6)[act])
    # through the step's micro-batch loss (PPO, seq-mean-token-mean): the gradient on action tokens is 0.15x
    cfg = LossParams(loss_agg="seq-mean-token-mean")
    mask = torch.ones(2, 6)
    grads = []
    for adv in (plain, tok):
        logp = torch.full((2, 6), -1.0, requires_grad=True)
        loss, _, _ = micro_batch_loss(POLICY_LOSSES.get("ppo"), logp, mask, adv, cfg_algo=cfg)
        loss.backward()
        grads.append(logp.grad.clone())
    assert torch.allclose(grads[1][act], 0.15 * grads[0][act])
    assert torch.allclose(grads[1][~act], grads[0][~act])
    assert not torch.allclose(grads[1], grads[0])


@pytest.mark.parametrize("ids,actions", [
    ([0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5], [3, 4, 5, 9, 10, 11]),  # two actions in one turn: the think between is no action
    ([3, 4, 5, 1, 1, 3, 4, 5, 6, 7, 6, 0, 2, 3, 5], [0, 1, 2, 5, 6, 7, 13, 14]),
    ([0, 1, 2, 3, 4, 6, 7, 6, 5], []),  # an action left open at the turn's end closes nothing
])
def test_the_default_action_pattern_is_each_action_element_on_its_own(ids, actions):
    spec = build_spec("stream_gdpo", {"action_loss_weight": 0.5}, LossParams())
    m = action_token_mask(ids, decode, spec.find_spans)
    assert [i for i, v in enumerate(m.tolist()) if v] == actions
    text = decode(ids)
    assert all(text[a:b].count("<action>") == 1 for a, b in spec.find_spans(text))
    batch = _batch({"out": [1.0, 0.0], "fmt": [1.0, 1.0], "tool": [0.0, 0.0], "mem": [0.0, 0.0]},
                   ids=[torch.tensor(ids), torch.tensor(ids)], decode=decode)
    plain = build_spec("stream_gdpo", {}, LossParams()).advantages(batch).advantages
    tok = spec.advantages(batch).advantages
    want = torch.tensor([0.5 if i in actions else 1.0 for i in range(len(ids))])
    assert torch.allclose(tok[0], plain[0] * want) and torch.allclose(tok[1], plain[1] * want)


def test_the_registered_spec_reports_rewards_metrics_and_takes_its_params():
    # two prompts of two rollouts; components by role
    comps = {"out": [1.0, 0.0, 1.0, 1.0], "fmt": [1.0, 1.0, 0.0, 1.0], "tool": [0.0, 0.0, 1.0, 0.0],
             "mem": [0.2, 0.1, 0.0, 0.4]}
    batch = _batch(comps, groups=[0, 0, 1, 1])
    want = stream_gdpo_advantages({k: torch.tensor(v) for k, v in comps.items()}, torch.tensor([0, 0, 1, 1]),
                                  {"out": 1.0, "fmt": 1.0, "tool": 0.5, "mem": 0.5})
    out = build_spec("stream_gdpo", {}, LossParams()).advantages(batch)
    assert torch.allclose(out.advantages, want) and torch.equal(out.rewards, batch.rewards)
    assert out.metrics["component/mem_mean"] == pytest.approx(0.175) and out.metrics["component/tool_mean"] == 0.25
    assert out.metrics["reward_mean"] == pytest.approx(float(batch.rewards.mean()))
    # a role missing from weights weighs 1; eps and unbiased_std reach the normalisation
    spec = build_spec("stream_gdpo", {"weights": {"tool": 0.5, "mem": 0.5}, "eps": 0.5, "unbiased_std": False},
                      LossParams())
    got = spec.advantages(batch).advantages
    from mmrl.algos.gdpo import gdpo_advantages

    want = gdpo_advantages({k: torch.tensor(v) for k, v in comps.items()}, torch.tensor([0, 0, 1, 1]),
                           {"out": 1.0, "fmt": 1.0, "tool": 0.5, "mem": 0.5}, eps=0.5, unbiased=False, batch_norm=False)
    assert torch.allclose(got, want) and not torch.allclose(got, out.advantages)
    # with the action weight: per-token advantages, the same rewards and metrics
    ids = [torch.tensor([3, 4, 5])] * 4
    tok = build_spec("stream_gdpo", {"action_loss_weight": 0.5}, LossParams()).advantages(
        _batch(comps, groups=[0, 0, 1, 1], ids=ids, decode=decode))
    assert torch.allclose(tok.advantages, 0.5 * out.advantages[:, None].expand(4, 3))
    assert torch.equal(tok.rewards, batch.rewards) and tok.metrics == out.metrics


def test_actions_span_lines_and_empty_tokens_are_never_actions():
    vocab = ["<action>", "\nsilence\n", "</action>", ""]
    dec = lambda ids: "".join(vocab[i] for i in ids)  # noqa: E731
    spec = build_spec("stream_gdpo", {"action_loss_weight": 0.5}, LossParams())
    assert action_token_mask([0, 1, 2], dec, spec.find_spans).tolist() == [True, True, True]  # dot matches newlines
    assert action_token_mask([0, 3, 1, 2], dec, spec.find_spans).tolist() == [True, False, True, True]
    with pytest.raises(ValueError, match="response token ids and tokenizer decode"):
        spec.advantages(_batch({"out": [1.0, 0.0], "fmt": [1.0, 1.0], "tool": [0.0, 0.0], "mem": [0.0, 0.0]}))


def test_config_errors_say_why():
    with pytest.raises(ConfigError) as e:
        build_spec("stream_gdpo", {"weights": {"speed": 1.0}}, LossParams())
    assert str(e.value) == ("config key 'algorithm.params.weights.speed' is not a Stream-GDPO role; roles: "
                            "out, fmt, tool, mem")
    with pytest.raises(ConfigError) as e:
        build_spec("stream_gdpo", {"components": {"out": "stream_out", "fmt": "stream_fmt", "tool": "stream_tool",
                                                  "mem": "stream_mem", "speed": "x"}}, LossParams())
    assert "'algorithm.params.components.speed' is not a Stream-GDPO role" in str(e.value)
    with pytest.raises(ConfigError, match=r"'algorithm.params.eps' must be >= 0, got -0.1"):
        build_spec("stream_gdpo", {"eps": -0.1}, LossParams())
    assert build_spec("stream_gdpo", {"eps": 0.0}, LossParams()).params.eps == 0.0  # 0 is allowed


def test_a_closing_tag_split_over_tokens_is_still_an_action():
    vocab = ["<think>", "x", "</think>", "<action>", "silence", "</action", ">"]
    dec = lambda ids: "".join(vocab[i] for i in ids)  # noqa: E731
    spec = build_spec("stream_gdpo", {"action_loss_weight": 0.5}, LossParams())
    assert action_token_mask([0, 1, 2, 3, 4, 5, 6], dec, spec.find_spans).tolist() == [False] * 3 + [True] * 4


def test_an_empty_batch_gives_empty_advantages():
    empty = StepBatch(rewards=torch.zeros(0), components={f"stream_{k}": torch.zeros(0) for k in R},
                      groups={"prompt": torch.zeros(0, dtype=torch.long)}, roles=[], views=[],
                      lengths=torch.zeros(0, dtype=torch.long), decode=decode)
    out = build_spec("stream_gdpo", {}, LossParams()).advantages(empty)
    assert out.advantages.shape == (0,) and out.metrics["component/out_mean"] == 0.0
