"""PACG's ``persistence: content``: persistence measured on a claim's content words, not its template (issue 29)."""
import math

import pytest
import torch

from mmrl.algos.base import LossParams
from mmrl.algos.pacg_claims import claims_in_text, content_token_spans, extract_claims, lexicon_pattern
from mmrl.algos.pacg_gate import claim_scores, segments_of, span_means
from mmrl.algos.spec import StepBatch, build_spec
from mmrl.algos.vppo import ORIGINAL_KEY
from mmrl.data.synth_claims import claim_content
from mmrl.errors import ConfigError

PATCH = "patch_mask|p=0.5|patch=14|value=0"
EXTRACTOR = "mmrl.data.synth_claims:claim_content"


def decode(ids):  # one token per character
    return "".join(chr(i) for i in ids)


def test_hand_vector_content_token_at_0_7_template_at_1():
    # one claim of 5 tokens, token 2 is its content word: retention e^d = 0.7 there, 1 on the template
    orig = [torch.zeros(5)]
    inter = [torch.tensor([0.0, 0.0, math.log(0.7), 0.0, 0.0])]
    rows, starts, ends = torch.tensor([0]), torch.tensor([0]), torch.tensor([5])
    p_claim, _ = claim_scores(inter, orig, rows, starts, ends)
    assert p_claim.tolist() == pytest.approx([(4 + 0.7) / 5])  # the claim average: 0.94
    owner, s, e = segments_of([[(2, 3)]])
    p_content, efs = claim_scores(inter, orig, rows[owner], s, e, owner, 1)
    assert p_content.tolist() == pytest.approx([0.7])
    assert efs.tolist() == pytest.approx([0.7 - math.log(0.7) - 1])


def test_segments_of_several_claims_are_token_weighted_per_claim():
    v = [torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), torch.tensor([10.0, 20.0, 30.0])]
    owner, s, e = segments_of([[(0, 1), (3, 5)], [(1, 3)]])  # claim 0 in row 0 (two words), claim 1 in row 1
    assert owner.tolist() == [0, 0, 1] and s.tolist() == [0, 3, 1] and e.tolist() == [1, 5, 3]
    rows = torch.tensor([0, 1])[owner]
    assert span_means(v, rows, s, e, owner, 2).tolist() == pytest.approx([(1 + 4 + 5) / 3, 25.0])
    with pytest.raises(ValueError, match="at least one content segment"):
        span_means(v, torch.tensor([0]), torch.tensor([0]), torch.tensor([1]), torch.tensor([0]), 2)
    o, s0, e0 = segments_of([])
    assert span_means(v, o, s0, e0, o, 0).numel() == 0


TEXTS = ["<think>I see a red square in the image. The square is shown on the left.</think>A",
         "<think>I see a blue square in the image.</think>B",
         "<think>I see a green square in the image. It looks fine.</think>A",
         "<think>The square is shown on the top.</think>B"]


def _batch(word_p, texts=TEXTS, rewards=(1.0, 0.0, 1.0, 0.0)):
    """Sampling log-probs 0; re-scored log-probs log(word_p[w]) on the characters of content word w, 0 elsewhere
    (template retention exactly 1)."""
    ids, inter = [], []
    for t in texts:
        lp = torch.zeros(len(t))
        for w, p in word_p.items():
            at = t.find(w)
            if at >= 0:
                lp[at:at + len(w)] = math.log(p)
        ids.append(torch.tensor([ord(c) for c in t]))
        inter.append(lp)
    n = len(texts)
    b = StepBatch(rewards=torch.tensor(rewards), components={"accuracy": torch.tensor(rewards)},
                  groups={"prompt": torch.tensor([0, 0, 1, 1][:n]), "pack": torch.zeros(n, dtype=torch.long)},
                  roles=["anchor"] * n, views=["original"] * n, lengths=torch.tensor([len(t) for t in texts]),
                  response_ids=ids, texts=list(texts), logprobs=[torch.zeros(len(t)) for t in texts],
                  rescored={PATCH: inter, ORIGINAL_KEY: [torch.zeros(len(t)) for t in texts]})  # trainer = sampler
    b.decode = decode
    return b


def test_spec_content_persistence_is_the_content_words_and_claim_is_the_sentence_mean():
    batch = _batch({"red": 0.7}, texts=TEXTS[:1], rewards=(1.0,))
    claim = build_spec("pacg", {"base": "grpo", "claim_extractor": EXTRACTOR}, LossParams()).advantages(batch)
    content = build_spec("pacg", {"base": "grpo", "claim_extractor": EXTRACTOR, "persistence": "content"},
                         LossParams()).advantages(batch)
    s1 = "I see a red square in the image."
    # claim: sentence 1 has 3 of its characters ("red") at 0.7, sentence 2 none (all 1)
    assert claim.metrics["pacg/persistence_mean"] == pytest.approx(((len(s1) - 3 + 3 * 0.7) / len(s1) + 1.0) / 2)
    assert content.metrics["pacg/persistence_mean"] == pytest.approx((0.7 + 1.0) / 2)
    assert claim.metrics["pacg/claims"] == content.metrics["pacg/claims"] == 2.0


def test_content_persistence_flags_what_the_sentence_mean_hides():
    # the content word of the blue claim keeps 0.99, the others 0.3-0.5; under `claim` the long template of the
    # shown-on sentences dilutes every claim toward 1 and the short-sentence ordering decides instead
    word_p = {"red": 0.4, "left": 0.5, "blue": 0.99, "green": 0.3, "top": 0.45}
    batch = _batch(word_p, rewards=(1.0, 0.0, 1.0, 0.0))
    spec = build_spec("pacg", {"base": "grpo", "claim_extractor": EXTRACTOR, "persistence": "content"}, LossParams())
    out = spec.advantages(batch)
    p = torch.tensor([0.4, 0.5, 0.99, 0.3, 0.45], dtype=torch.float64)  # claims in order; "It looks fine." has none
    z = (p - p.mean()) / p.std()
    assert out.metrics["pacg/claims"] == 5.0 and out.metrics["pacg/claims_not_measured"] == 1.0
    assert out.metrics["pacg/flagged_frac"] == pytest.approx(float((z > 1).double().mean()))
    assert out.metrics["pacg/flagged_frac"] == pytest.approx(0.2)  # only the blue claim (z = 1.74)
    # under `claim` the sentence means: the template dilutes every claim toward 1, and the claim without a content
    # word ("It looks fine.", a lexicon hit, P = 1) is flagged with the blue one
    sents = ["I see a red square in the image.", "The square is shown on the left.", "I see a blue square in the image.",
             "I see a green square in the image.", "It looks fine.", "The square is shown on the top."]
    words = ["red", "left", "blue", "green", None, "top"]
    pc = torch.tensor([1.0 if w is None else (len(s) - len(w) + len(w) * word_p[w]) / len(s)
                       for s, w in zip(sents, words)], dtype=torch.float64)
    zc = (pc - pc.mean()) / pc.std()
    claim = build_spec("pacg", {"base": "grpo", "claim_extractor": EXTRACTOR}, LossParams()).advantages(batch)
    assert claim.metrics["pacg/claims"] == 6.0 and claim.metrics["pacg/claims_not_measured"] == 0.0
    assert claim.metrics["pacg/persistence_mean"] == pytest.approx(float(pc.mean()), abs=1e-6)
    assert (zc > 1).tolist() == [False, False, True, False, True, False]
    assert claim.metrics["pacg/flagged_frac"] == pytest.approx(2 / 6)
    # row 1 (the blue claim) has a negative advantage: unchanged; every other row too (nothing else flagged)
    base = build_spec("grpo", {}, LossParams()).advantages(batch).advantages
    for i, t in enumerate(TEXTS):
        assert out.advantages[i, : len(t)].tolist() == pytest.approx([base[i].item()] * len(t))


def test_a_flagged_positive_claim_is_gated_on_its_whole_sentence():
    word_p = {"red": 0.99, "left": 0.5, "blue": 0.4, "green": 0.3, "top": 0.45}
    batch = _batch(word_p, rewards=(1.0, 0.0, 1.0, 0.0))
    out = build_spec("pacg", {"base": "grpo", "claim_extractor": EXTRACTOR, "persistence": "content"},
                     LossParams()).advantages(batch)
    base = build_spec("grpo", {}, LossParams()).advantages(batch).advantages
    p = torch.tensor([0.99, 0.5, 0.4, 0.3, 0.45], dtype=torch.float64)
    g = max(0.5, 1 - 0.5 * (float((p[0] - p.mean()) / p.std()) - 1))
    t = TEXTS[0]
    a, b = t.index("I see a red"), t.index("image.") + 6
    assert out.advantages[0, a:b].tolist() == pytest.approx([base[0].item() * g] * (b - a), abs=1e-4)
    assert out.advantages[0, :a].tolist() == pytest.approx([base[0].item()] * a)
    assert out.advantages[0, b:len(t)].tolist() == pytest.approx([base[0].item()] * (len(t) - b))


def test_config_errors_name_the_key_before_any_weights_load():
    with pytest.raises(ConfigError, match=r"algorithm.params.persistence' must be one of claim, content"):
        build_spec("pacg", {"base": "dapo", "persistence": "contents", "claim_extractor": EXTRACTOR}, LossParams())
    with pytest.raises(ConfigError, match=r"algorithm.params.persistence' = content needs .*claim_extractor"):
        build_spec("pacg", {"base": "dapo", "persistence": "content"}, LossParams())
    from mmrl.config import load_config

    with pytest.raises(ConfigError, match=r"algorithm.params.persistence"):
        load_config(None, ["algorithm.name=pacg", "algorithm.params={persistence: token}"])
    cfg = load_config(None, ["algorithm.name=pacg",
                             f"algorithm.params={{persistence: content, claim_extractor: '{EXTRACTOR}'}}"])
    assert cfg.algorithm.params["persistence"] == "content"
    assert build_spec("pacg", {}, LossParams()).params.persistence == "claim"  # the paper's stays the default


def test_claim_content_extractor_and_bad_spans():
    s = "I see a red square on the left."
    assert [s[a:b] for a, b in claim_content(s)] == ["red", "left"]
    assert claim_content("So I pick option B.") == []
    text = "<think>I see a red square. It is big.</think>"
    got = claims_in_text(text, lexicon_pattern(["big"]), claim_content)
    assert [(text[a:b], [text[x:y] for x, y in c]) for a, b, c in got] == [("I see a red square.", ["red"]),
                                                                           ("It is big.", [])]
    with pytest.raises(ValueError, match="outside the sentence"):
        claims_in_text(text, None, lambda sent: [(0, len(sent) + 1)])


def test_content_spans_on_a_real_tokenizers_pieces(tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    dec = lambda x: tok.decode(x, skip_special_tokens=False)  # noqa: E731
    text = "<think>I see a turquoise square in the image. The square is shown on the bottom.</think><answer>A</answer>"
    ids = tok.encode(text, add_special_tokens=False)

    def words(sentence):
        return [(m.start(), m.end()) for w in ("turquoise", "bottom") for m in [__import__("re").search(w, sentence)]
                if m]

    claims = extract_claims(dec, [ids], lexicon=[], extractor=words)
    assert [c.text for c in claims] == ["I see a turquoise square in the image.", "The square is shown on the bottom."]
    (s, e), = claims[0].content
    assert e - s >= 3  # "turquoise" is several pieces of this BPE, merged into one span
    assert dec(ids[s:e]).strip() == "turquoise"
    assert claims[0].tok_start <= s and e <= claims[0].tok_end
    (s2, e2), = claims[1].content
    assert dec(ids[s2:e2]).strip() == "bottom"
    # two words touching in one piece count once; disjoint words stay two segments
    assert content_token_spans([(0, 2), (2, 5), (5, 8), (8, 9)], [(1, 3), (3, 4), (8, 9)]) == ((0, 2), (3, 4))


def test_claim_scores_average_a_claims_segments_token_weighted():
    """A claim with two content words (two segments): P and EFS are means over all their tokens, not per segment."""
    orig = [torch.zeros(8)]
    d = [0.0, math.log(0.4), math.log(0.4), 0.0, 0.0, math.log(0.9), math.log(0.9), math.log(0.9)]
    inter = [torch.tensor(d)]
    owner, s, e = segments_of([[(1, 3), (5, 8)]])
    p, efs = claim_scores(inter, orig, torch.tensor([0])[owner], s, e, owner, 1)
    assert p.tolist() == pytest.approx([(2 * 0.4 + 3 * 0.9) / 5])
    efs_tok = [r - math.log(r) - 1 for r in (0.4, 0.4, 0.9, 0.9, 0.9)]
    assert efs.tolist() == pytest.approx([sum(efs_tok) / 5])


def test_no_claims_and_no_segments_give_empty_or_sized_results():
    v = [torch.tensor([1.0, 2.0])]
    none = torch.zeros(0, dtype=torch.long)
    assert span_means(v, none, none, none).shape == (0,)  # one value per span: no spans, no values
    assert span_means(v, none, none, none, None, 2).shape == (0,)
    assert span_means(v, none, none, none, none).shape == (0,)  # n defaults to no claims
    assert span_means(v, none, none, none, none, 2).tolist() == [0.0, 0.0]  # one value per claim
    p, efs = claim_scores([torch.zeros(2)], [torch.zeros(2)], none, none, none, none)
    assert p.shape == efs.shape == (0,)
    owner, s, e = segments_of([])
    assert owner.dtype == s.dtype == e.dtype == torch.long and owner.numel() == 0  # usable as indices
    with pytest.raises(ValueError, match=r"^every claim needs at least one content segment$"):
        span_means(v, torch.tensor([0]), torch.tensor([0]), torch.tensor([1]), torch.tensor([1]), 2)


def test_a_claim_with_two_content_words_is_measured_on_both_through_the_method():
    texts = ["<think>I see a red square on the left.</think>A", "<think>I see a blue square in the image.</think>B"]
    batch = _batch({"red": 0.4, "left": 0.9, "blue": 0.6}, texts=texts, rewards=(1.0, 0.0))
    batch.groups = {"prompt": torch.tensor([0, 0]), "pack": torch.zeros(2, dtype=torch.long)}
    out = build_spec("pacg", {"base": "grpo", "claim_extractor": EXTRACTOR, "persistence": "content"},
                     LossParams()).advantages(batch)
    assert out.metrics["pacg/claims"] == 2.0
    assert out.metrics["pacg/persistence_mean"] == pytest.approx(((3 * 0.4 + 4 * 0.9) / 7 + 0.6) / 2)


def test_an_extractor_that_cannot_be_imported_is_named():
    with pytest.raises(ConfigError, match=r"^config key 'algorithm\.params\.claim_extractor': claim extractor "
                                          r"'no_such_module:f' could not be imported: "):
        build_spec("pacg", {"base": "grpo", "claim_extractor": "no_such_module:f"}, LossParams())
