"""bench/fastrl_protocol.py and its table: time to the base's best accuracy, ARS's predicted rollout counts, MDAP's
prune split on a hand-made group, the paper's direction from paired differences, the results file rendered from
hand-built seed records, and (slow) a smoke run of one seed with the tiny model."""
import json
import sys

import pytest

from tests.support import BENCH

if str(BENCH) not in sys.path:  # the bench modules import their siblings by name (as the bench scripts do)
    sys.path.insert(0, str(BENCH))
import _protocol as P  # noqa: E402
import fastrl_protocol_table as T  # noqa: E402


def _pts(*rows):  # (step, acc, cpu): wall = 2 cpu, gen = 100 cpu, upd = 50 cpu
    return [{"step": s, "acc": a, "cpu": c, "wall": 2 * c, "gen": 100 * c, "upd": 50 * c} for s, a, c in rows]


def test_time_to_best_reads_the_first_point_at_the_bases_best():
    base = _pts((0, 0.40, 0), (10, 0.50, 100), (20, 0.48, 200), (30, 0.50, 300))  # best 0.50, first at step 10
    fast = _pts((0, 0.40, 0), (10, 0.45, 60), (20, 0.52, 120), (30, 0.44, 180))
    t = T.time_to_best({"grpo": {"points": base}, "grpo_fastrl": {"points": fast}}, "grpo")
    assert t["target"] == 0.50 and t["base_step"] == 10 and t["fast_step"] == 20 and t["why"] is None
    assert t["speedup_cpu"] == pytest.approx(100 / 120) and t["speedup_gen"] == pytest.approx(100 / 120)
    assert t["base_wall"] == 200 and t["fast_upd"] == 6000
    never = T.time_to_best({"grpo": {"points": base}, "grpo_fastrl": {"points": fast[:2]}}, "grpo")
    assert never["why"] == "FastRL never reached it" and never["speedup_cpu"] is None
    assert never["base_cpu"] == 100 and never["fast_cpu"] is None  # the base's own cost is still read
    flat = _pts((0, 0.55, 0), (10, 0.50, 100))  # RL never improved on the start: no time to read
    t = T.time_to_best({"grpo": {"points": flat}, "grpo_fastrl": {"points": fast}}, "grpo")
    assert t["why"].startswith("the base's best is its SFT start") and t["base_cpu"] is None


def test_ars_predict_moves_n_only_when_the_kept_sets_shrink():
    # G'_ref = (2 + 4) / 2 = 3; epoch 3: α = 16/40, G'_t = 3.2 >= 3 -> 8; epoch 4: α = 0.6, G'_t = 2.8 -> round(7.8)
    # = 8; epoch 5: α = 0.8, G'_t = 2.4 -> round(7.4) = 7
    assert T.ars_predict([(2.0, 4.0)], 8, 8, 40, 5) == [8, 8, 8, 8, 7]
    assert T.ars_predict([(1.0, 1.0)], 8, 8, 40, 5) == [8, 8, 8, 8, 8]  # mean = max: G'_t = G'_ref, n stays G
    assert T.ars_predict([], 8, 8, 40, 5) == []


def test_mdap_stats_on_a_hand_made_group():
    # group 0: rewards 1, 1, 0, 0 -> two partitions; the two correct responses share no bigram (both kept by the
    # similarity test), the two wrong ones are identical (one kept); group 1: zero spread, identical (one kept)
    rewards = [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    responses = [[[1, 2, 3], [4, 5, 6], [7, 8, 9], [7, 8, 9]], [[1, 2, 3]] * 4]
    st = T.mdap_stats(rewards, responses, tau=0.8, ngram=2, prompts_per_step=2, g_max=4, steps_per_epoch=1,
                      total_steps=4, epochs=4)
    assert st["pruned_by_advantage"] == pytest.approx(1 - 3 / 8)  # τ = 1 keeps one per partition: 3 of 8
    assert st["kept_by_similarity"] == pytest.approx(1 / 8)  # τ = 0.8 keeps the second correct response too
    assert st["partitions_similarity_acts"] == pytest.approx(1 / 3)
    assert st["kept_sizes"] == [(2.0, 3.0)] and st["kept_per_prompt"] == 2.0
    ok, why = T.mdap_can_act(st)
    assert ok and "prunes 50.0%" in why and "keeps back 12.5% (acts)" in why
    same = T.mdap_stats([[1.0, 0.0], [1.0, 0.0]], [[[1, 2], [3, 4]], [[1, 2], [3, 4]]], 0.8, 2, 2, 2, 1, 2, 2)
    assert not T.mdap_can_act(same)[0]  # every partition has one rollout: nothing to prune


def test_group_advantages_and_direction():
    adv = T.group_advantages([[1.0, 0.0], [0.5, 0.5]])
    assert adv[0] == pytest.approx([1.0, -1.0], abs=1e-5) and adv[1] == [0.0, 0.0]
    assert T.direction([10.0, 12.0, 11.0], +1) == "reproduced"
    assert T.direction([-10.0, -12.0, -11.0], +1) == "reversed"
    assert T.direction([10.0, -12.0, 1.0], +1).startswith("not resolved (CI contains 0)")
    assert T.direction([10.0, None, 1.0], +1).startswith("not resolved (undefined")


def _record(seed, fast_cpu):
    pf = {"seed": seed, "per_type": {"color": {"acc": 0.9, "chance": 0.25, "n": 80, "above_chance": 1.0}},
          "pass_at": {"1": 0.6, "8": 0.9}, "zero_spread": 0.3, "n_groups": 32, "group_size": 8,
          "mechanism": {"pruned_by_advantage": 0.6, "kept_by_similarity": 0.1}, "can_act": True, "reason": "ok"}
    base = _pts((0, 0.40, 0), (10, 0.50, 100), (20, 0.49, 200))
    fast = _pts((0, 0.40, 0), (10, 0.50, fast_cpu), (20, 0.47, 2 * fast_cpu))
    arm = lambda pts: {"points": pts, "kept_frac": 1.0, "rollouts_per_prompt": 8.0}  # noqa: E731
    settings = dict(world="56 px, 8 frames", styles=4, answer_first=True, n_train=64, n_rl=16, n_val=8, n_test=400,
                    sft_steps=10, rl_steps=20, prompts_per_step=8, n=8, max_new_tokens=112, tau=0.8, ngram=2,
                    eval_every=10)
    return {"seed": seed, "settings": settings, "preflight": {"pf": pf, "start_acc": 0.40, "ars_n": [8, 8, 7],
                                                              "truncation": 0.0, "mdap_other_ngram": {"2": {
                                                                  "pruned_by_advantage": 0.6, "kept_by_similarity": 0.55,
                                                                  "partitions_similarity_acts": 0.9}},
                                                              "style_distances": [[2, 0, 1, 0.85 + seed / 100, 0.9, 1.0]]},
            "selection": {"lr": 1e-5, "kl": 0.0, "scores": {"lr1e-05_kl0": 0.5, "lr3e-05_kl0": 0.4}},
            "arms": {"grpo": arm(base), "grpo_fastrl": arm(fast), P.COIN_ARM: arm(_pts((0, 0.4, 0), (20, 0.3, 200)))},
            "dropped": {"dapo": "predicted to end at 09:30 UTC"}, "minutes": {"sft": 1.0}}


def test_render_from_seed_records():
    proto = P.Protocol(command="python bench/fastrl_protocol.py --only S", seeds=[0, 1, 2], n_test=400, n_val=8,
                       lr_grid=[1e-5, 3e-5], kl_grid=[0.0])
    text = T.render([_record(0, 50), _record(1, 40), _record(2, 45)], proto)
    assert "Command: `python bench/fastrl_protocol.py --only S`" in text
    assert "## Pre-flight (SFT start, before any RL)" in text and "seed 2: [8, 8, 7]" in text
    assert "| 1e-05 | 50.0 **(chosen)** |" in text
    assert "seed 1: 5.0% pruned, 55.0% kept back by the similarity test (2-grams)" in text
    assert "| 2 | 0 vs 1 | 0.850 | 0.900, 0.900, 0.900 | 100%, 100%, 100% |" in text
    assert "| GRPO | 1 | 50.0 | 10; 100, 200, 10.0, 5.0 | 10; 40, 80, 4.0, 2.0 | 2.50x | 2.50x |  |" in text
    # speed-ups 2.0, 2.5, 2.22: mean 2.24; base − FastRL CPU s 50, 60, 55 -> CI above 0 -> reproduced
    assert "(3/3): 2.24 [" in text and "in less time** (paper: yes): reproduced." in text
    assert "| grpo − coin_flip | +19.0 [19.0, 19.0] (CI above 0) |" in text
    assert "keeps the final accuracy** (paper: comparable or better): reversed" in text  # 0.47 vs 0.49 everywhere
    assert "- dapo: seed 0: predicted to end at 09:30 UTC" in text
    assert "coin_flip: not run (evaluated at its end only" in text  # no best-over-the-curve for the control
    recs = [_record(s, 50) for s in (0, 1, 2)]
    for r in recs:  # FastRL never gets to the base's best on any seed: the claim reads reversed
        r["arms"]["grpo_fastrl"]["points"] = _pts((0, 0.40, 0), (10, 0.45, 50), (20, 0.47, 100))
    text = T.render(recs, proto)
    assert "(paper: yes): reversed: FastRL never reached the base's best held-out accuracy" in text
    assert "| GRPO | 0 | 50.0 | 10; 100, 200, 10.0, 5.0 | —; —, —, —, — | — | — | FastRL never reached it |" in text


@pytest.mark.slow
def test_fastrl_protocol_smoke(tiny_model_path, tmp_path):
    import fastrl_protocol as B

    out, rec = tmp_path / "run", tmp_path / "rec"
    argv = ["--smoke", "--seeds", "0", "--model", "tiny", "--n-train", "24", "--n-rl", "8", "--n-test", "8",
            "--n-val", "4", "--sft-steps", "4", "--rl-steps", "2", "--eval-every", "1", "--preflight-groups", "4",
            "--max-new-tokens", "8", "--n", "4", "--prompts-per-step", "4", "--tau", "1.0", "--lr-grid", "1e-5",
            "--optional", "--wait-min", "0.1", "--out", str(out), "--seed-dir", str(rec)]
    B.main(argv + ["--only", "0"])
    r = json.loads((rec / "seed0.json").read_text())
    assert set(r["arms"]) == {"grpo", "grpo_fastrl", P.COIN_ARM}
    for name, a in r["arms"].items():
        steps = [0, 2] if name == P.COIN_ARM else [0, 1, 2]  # the control: its end only
        assert [p["step"] for p in a["points"]] == steps and a["points"][0]["acc"] == r["preflight"]["start_acc"]
    assert r["arms"]["grpo_fastrl"]["kept_frac"] < 1.0  # τ = 1: one rollout per advantage partition
    B.main(argv + ["--render", "--report", str(tmp_path / "fastrl.md")])
    assert "SMOKE RUN" in (tmp_path / "fastrl.md").read_text()
