"""Smoke run of bench/bpo_vs_grpo.py (the miniature of BPO's table): 1 seed, a tiny world, a few SFT and RL steps.

Checks the plumbing, not the numbers: every arm trains from the same SFT checkpoint at the stated budgets, every
arm is evaluated with the BPO view set over the whole test split, and the table carries the metrics and costs.
Plus regression tests for the bugs the benchmark found (view metrics averaged per eval chunk; the abstention
letter of one question type taken as abstaining on another in BPO's contract reward and the per-view accuracy)."""
import json

import pytest
from support import REPO, load_bench


def _load():
    return load_bench("bpo_vs_grpo")


@pytest.mark.slow
def test_bpo_vs_grpo_smoke(tiny_model_path, tmp_path, capsys):
    bench = _load()
    out = tmp_path / "bench"
    common = ["--seeds", "0", "1", "--arms", "grpo", "grpo_g2", "tgrpo", "bpo", "bpo_anchor", "--sft-steps", "2",
              "--rl-steps", "2", "--n-train", "10", "--n-test", "5", "--prompts-per-step", "2", "--out", str(out),
              "--cost-tokens", "12", "--cost-steps", "1", "--cost-prompts", "1",
              "--arm", f"bpo_paired {REPO / 'configs' / 'bpo_demo.yaml'} algorithm.params.anchor_mode=paired "
                       "rewards.0.params.fmt_weight=0.0"]
    bench.main(common + ["--jobs", "2", "--report", str(tmp_path / "report.md"), "sft.batch_size=4", "train.micro_batch=32"])
    table = capsys.readouterr().out
    # the extra arm: trained from the same SFT checkpoint with its overrides, evaluated, and in the table
    assert "| bpo_paired |" in table and "| bpo_paired − GRPO |" in table
    paired_cfg = (out / "seed1" / "bpo_paired" / "config.yaml").read_text()
    assert "anchor_mode: paired" in paired_cfg and "fmt_weight: 0.0" in paired_cfg
    # --render-only prints the same table from the saved seed results, without training
    bench.main(common + ["--render-only", "sft.batch_size=4", "train.micro_batch=32"])
    again = capsys.readouterr().out
    assert again.split("Wall time")[0] == table.split("Wall time")[0]
    for text in ("GRPO (G=8)", "T-GRPO (8+4)", "BPO (2x4)", "abstention F1 (held-out nulls)", "stability (changed pixels)",
                 "sensitivity (vs expected)", "answer w/o looking", "temporal acc", "BPO (2x4) vs GRPO (G=8) (same budget)",
                 "BPO anchor-only (2x1) vs GRPO (G=2) (same budget)", "| BPO − BPO anchor-only |", "View construction share",
                 "work ratio", "step ratio / work ratio", "per token of work", "At up to 12 response tokens", "learned",
                 "null_texture", "Per-seed differences"):
        assert text in table, text
    assert (tmp_path / "report.md").read_text().split("Wall time")[0] == table.split("Wall time")[0]
    res, res1 = json.loads((out / "results.json").read_text())  # seeds 0 and 1, each in its own process
    assert (res["seed"], res1["seed"]) == (0, 1)
    # work per step: BPO prefills 4 views per clip, GRPO 1; both generate 8 responses per clip
    assert res["costs"]["bpo"]["prompts"] == 4 * res["costs"]["grpo"]["prompts"] == 4 * 2
    assert res["costs"]["bpo"]["prompt_tokens"] > 3 * res["costs"]["grpo"]["prompt_tokens"] > 0
    # budgets: GRPO 8, BPO 2 packs x 4 views = 8 on every question type, T-GRPO 8 ordered + 4 shuffled
    assert set(res["budgets"]["grpo"].values()) == {8}
    assert res["budgets"]["bpo"] == res["budgets"]["grpo"]
    assert set(res["budgets"]["grpo_g2"].values()) == set(res["budgets"]["bpo_anchor"].values()) == {2}
    # T-GRPO: 8 ordered + 4 shuffled, the shuffle skipped on static clips (color, location)
    assert res["budgets"]["tgrpo"]["color"] == res["budgets"]["tgrpo"]["location"] == 8
    assert max(res["budgets"]["tgrpo"].values()) == 12
    # every arm (and the SFT start point) evaluated with the held-out view set
    assert set(res["eval"]) == {"sft", "grpo", "grpo_g2", "tgrpo", "bpo", "bpo_anchor", "bpo_paired"}
    for arm, e in res["eval"].items():
        assert {"null_black", "null_texture", "original", "reverse", "mask_irrelevant"} <= set(e["view_acc"]), arm
        assert "blank" not in e["view_acc"]  # training's null view is not an eval view
        assert 0.0 <= e["no_look"] <= 1.0 and 0.0 <= e["stability"] <= 1.0, arm
    # the eval's view metrics cover the whole test split: one blank view per test clip, all in the predictions
    rows = [json.loads(x) for x in (out / "seed0" / "eval_bpo" / "predictions.jsonl").read_text().splitlines()]
    assert sum(r["view"] == "null_noise" for r in rows) == 5 and sum(r["role"] == "abstain" for r in rows) == 25
    # the abstention option is in every prompt the SFT and RL stages saw
    train = json.loads((out / "seed0" / "world" / "train_abst.json").read_text())
    assert all(it["candidates"][-1] == "cannot be determined" for it in train)
    for arm in ("grpo", "tgrpo", "bpo"):
        assert (out / "seed0" / arm / "final" / "config.json").exists()
        steps = [json.loads(x)["step"] for x in (out / "seed0" / arm / "metrics.jsonl").read_text().splitlines()]
        assert steps == [1, 2]
    assert 0 < res["costs"]["bpo"]["view_share"] < 1



class _ScriptedEngine:
    """Answers without a model: the abstention letter on every third prompt, else the expected letter or "A"."""

    def generate(self, requests, params):
        import re

        import torch

        from mmrl.data.schema import Trajectory

        out = []
        for k, r in enumerate(requests):
            abst = re.search(r"\(([A-Z])\) cannot be determined", r.inputs.text).group(1)
            text = abst if k % 3 == 0 else (r.expected if r.expected and len(r.expected) == 1 and k % 2 else "A")
            out.append(Trajectory(sample_id=r.sample_id, group_id=r.group_id, view=r.view, role=r.role,
                                  prompt_ids=r.inputs.input_ids, response_ids=torch.tensor([0]),
                                  logprobs=torch.zeros(1), loss_mask=torch.ones(1, dtype=torch.bool), text=text,
                                  expected=r.expected, inputs_key=k))
        return out


@pytest.mark.slow
def test_eval_view_metrics_pool_the_whole_split(tiny_model_path, video_world):
    """evaluate_samples computes the view metrics once over every trajectory of the split: how the split is
    chunked into prompt batches cannot change them (they used to be a weighted mean of per-chunk values)."""
    from mmrl.config import load_config
    from mmrl.data.annotations import load_samples
    from mmrl.eval.synthetic import evaluate_samples
    from mmrl.models.loading import load_processor
    from mmrl.rollout.view_metrics import view_metrics
    from mmrl.views import ViewSet

    cfg = load_config(None, ["data.max_pixels=3136", "data.nframes=8"])
    samples, _ = load_samples(str(video_world / "test.json"), None)
    processor = load_processor(tiny_model_path)
    vs = ViewSet.load(str(REPO / "views" / "bpo_video.yaml"))
    res = {b: evaluate_samples(None, processor, samples, cfg.data, viewset=vs, batch_prompts=b, engine=_ScriptedEngine())
           for b in (64, 3)}
    whole, chunked = res[64]["view_metrics"], res[3]["view_metrics"]
    assert 0 < whole["abstain_f1"] < 1 and 0 < whole["stability_rate"] < 1
    assert chunked == pytest.approx(whole)
    # and they are view_metrics over the whole split at once
    from mmrl.rollout.step_inputs import build_step_inputs

    si = build_step_inputs(samples, processor, cfg.data, lambda role, n_views: 1, vs, seed=0)
    assert view_metrics(_ScriptedEngine().generate(si.requests, None), si, vs.abstain_text) == pytest.approx(whole)


def _ctx(qtype, candidates, answer, view, role, expected, text, group, pack):
    import torch

    from mmrl.data.schema import Sample, Trajectory
    from mmrl.rewards.base import RewardContext

    sample = Sample(id=f"{qtype}-{group}", question="?", candidates=[c for c in candidates if c != "cannot be determined"],
                    answer=answer, qtype=qtype)
    traj = Trajectory(sample_id=sample.id, group_id=group, view=view, role=role, prompt_ids=torch.zeros(1, dtype=torch.long),
                      response_ids=torch.tensor([1, 2]), logprobs=torch.zeros(2), loss_mask=torch.ones(2, dtype=torch.bool),
                      text=text, expected=expected, pack_id=pack)
    return RewardContext(sample=sample, trajectory=traj, candidates=candidates, view=view, role=role, expected=expected)


def test_bpo_contract_abstention_letter_is_per_question():
    """A batch mixing a 3-option question (abstention = D) and a 4-option one (abstention = E): on the 4-option
    question D is a real answer, so a correct D on the original clip earns its reward and D on the blank view is
    not an abstention."""
    from mmrl.rewards.bpo_contract import bpo_contract

    count = ["1", "2", "3", "cannot be determined"]
    colour = ["red", "green", "blue", "yellow", "cannot be determined"]
    ctx = [_ctx("count", count, "2", "original", "anchor", "B", "B", 0, 0),
           _ctx("count", count, "2", "blank", "abstain", "abstain", "D", 0, 0),
           _ctx("color", colour, "yellow", "original", "anchor", "D", "D", 1, 0),
           _ctx("color", colour, "yellow", "blank", "abstain", "abstain", "D", 1, 0),
           _ctx("color", colour, "yellow", "original", "anchor", "D", "E", 2, 0),
           _ctx("color", colour, "yellow", "blank", "abstain", "abstain", "E", 2, 0)]
    out = bpo_contract(ctx)
    assert out["bpo_contract"] == pytest.approx([1.1, 1.0, 1.1, 0.0, 0.0, 1.0])
    assert out["accuracy"] == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]


def test_view_accuracy_of_abstain_views_counts_the_abstention_option():
    from types import SimpleNamespace

    from mmrl.rollout.view_metrics import view_metrics

    ctx = [_ctx("color", ["red", "green", "blue", "yellow", "cannot be determined"], "red", "blank", "abstain", "abstain",
                text, 0, 0) for text in ("E", "D")]
    ctx.append(_ctx("color", ["red", "green", "blue", "yellow", "cannot be determined"], "red", "occlude_obj", "sensitive",
                    None, "E", 0, 0))
    si = SimpleNamespace(candidates={(c.sample.id, c.view): c.candidates for c in ctx}, samples={c.sample.id: c.sample for c in ctx})
    m = view_metrics([c.trajectory for c in ctx], si, "cannot be determined")
    assert m["view_acc/blank"] == 0.5 and "view_acc/occlude_obj" not in m
    assert m["abstain_precision"] == 1.0 and m["abstain_recall"] == 0.5  # abstaining on occlude_obj: undetermined
