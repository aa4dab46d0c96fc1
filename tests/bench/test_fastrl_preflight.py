"""FastRL's offline pre-flight (bench/fastrl_preflight.py): what MDAP keeps by similarity against by advantage alone,
and whether the reasoning styles are far enough apart for the similarity test to act."""
import json

import torch
from support import load_bench


def test_mdap_split_on_the_spec_vector():
    """specs/algorithms.md §4 test 1: A = [a, a, b, b], unigram sets {1,2,3,4}, {1,2,3,5}, {7,8}, {9,10}, τ = 0.8:
    MDAP keeps o1, o3, o4; advantage alone keeps one per partition (o1, o3)."""
    b = load_bench("fastrl_preflight")
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    gids = torch.zeros(4, dtype=torch.long)
    resp = [torch.tensor(x) for x in ([1, 2, 3, 4], [1, 2, 3, 5], [7, 8], [9, 10])]
    assert b.mdap_split(adv, gids, resp, tau=0.8) == {"pruned_by_advantage": 0.5, "kept_by_similarity": 0.25,
                                                       "partitions_similarity_acts": 0.5}
    # alike responses in both partitions (θ 0.4 and 0.67 < τ): MDAP is advantage-only pruning
    alike = [torch.tensor(x) for x in ([1, 2, 3, 4], [1, 2, 3, 5], [7, 8], [7, 9])]
    assert b.mdap_split(adv, gids, alike, tau=0.8) == {"pruned_by_advantage": 0.5, "kept_by_similarity": 0.0,
                                                        "partitions_similarity_acts": 0.0}
    # two prompts: partitions never span them, so identical responses of different prompts are both kept
    two = b.mdap_split(torch.tensor([1.0, 1.0]), torch.tensor([0, 1]), [torch.tensor([1, 2])] * 2, tau=0.8)
    assert two["pruned_by_advantage"] == 0.0 and two["partitions_similarity_acts"] != two["partitions_similarity_acts"]


def test_style_distances_pairs_and_values():
    b = load_bench("fastrl_preflight")
    items = [{"id": "x", "qtype": "color", "answer": "red", "candidates": ["blue", "red", "green", "yellow"],
              "meta": {"colors": ["red"], "evidence_frames": [0, 3]}}]
    d = b.style_distances(lambda t: [ord(c) for c in t], items, styles=3, ngrams=(1, 2))
    assert sorted(d) == [(n, a, c) for n in (1, 2) for a, c in ((0, 1), (0, 2), (1, 2))]
    assert all(len(v) == 1 and 0.0 < v[0] < 1.0 for v in d.values())
    assert all(d[(2, a, c)][0] > d[(1, a, c)][0] for _, a, c in d)  # bigrams tell texts apart more than characters


def test_the_similarity_test_can_act_on_the_styles_with_bigrams(video_world, tiny_model_path):
    """The claim bench/fastrl.py relies on (--reasoning-styles 4 --ngram 2): under the tiny model's tokenizer (the
    base's), every pair of styles is at θ >= 0.8 for every item, while unigrams leave most pairs below it."""
    from transformers import AutoTokenizer

    b = load_bench("fastrl_preflight")
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    items = json.loads((video_world / "train.json").read_text())
    d = b.style_distances(lambda t: tok.encode(t, add_special_tokens=False), items, styles=4, ngrams=(1, 2))
    assert all(x >= 0.8 for (n, _, _), xs in d.items() if n == 2 for x in xs)
    uni = [x for (n, _, _), xs in d.items() if n == 1 for x in xs]
    assert sum(x < 0.8 for x in uni) > len(uni) / 2
    table = b.distance_table(d, 0.8)
    assert table[0].startswith("| n-gram | styles |") and "| 2 | 0 vs 1 |" in "\n".join(table)
