"""bench/fastrl.py: the time-to-accuracy rule on hand-made curves, and a smoke run (1 seed, a tiny world, a few SFT
and RL steps) that checks the plumbing, not the numbers: six arms from one SFT checkpoint, FastRL arms prune, the
table, results and plot are written, ``--reuse-sft`` skips the warm-up, ``--sft-only`` stops before RL; the
predicted-letter counts and the 95% interval of the table on hand-made inputs."""
import json

import pytest
from support import load_bench


def _load():
    return load_bench("fastrl")


def _pts(*rows):
    return [{"step": i, "wall": w, "tokens": t, "acc": a} for i, (w, t, a) in enumerate(rows)]


def test_time_to_accuracy_rule():
    bench = _load()
    base = _pts((0, 0, 0.30), (10, 100, 0.36), (20, 200, 0.34), (30, 300, 0.36))  # final 0.36, first reached at 10 s
    fast = _pts((0, 0, 0.30), (4, 50, 0.32), (8, 80, 0.40), (12, 120, 0.35))
    r = {"arms": {"grpo": {"final_acc": 0.36, "points": base}, "grpo_fastrl": {"final_acc": 0.35, "points": fast}}}
    p = bench.pair_stats(r, "grpo")
    assert p["base"]["wall"] == 10 and p["fast"]["wall"] == 8
    assert p["speedup"] == pytest.approx(10 / 8) and p["token_ratio"] == pytest.approx(100 / 80)
    r["arms"]["grpo_fastrl"]["points"] = _pts((0, 0, 0.30), (4, 50, 0.32))  # never reached
    assert bench.pair_stats(r, "grpo")["speedup"] is None
    r["arms"]["grpo"]["points"] = _pts((0, 0, 0.40), (10, 100, 0.36))  # the start already had it: no ratio
    r["arms"]["grpo"]["final_acc"] = 0.36
    assert bench.pair_stats(r, "grpo")["speedup"] is None
    assert bench.pair_stats(r, "grpo")["why"].startswith("n/a: base ended at or below the start")


def test_pred_letters_and_ci(tmp_path):
    bench = _load()
    preds = tmp_path / "step_000000.jsonl"
    rows = [{"pred": "B"}, {"pred": "A"}, {"pred": "B"}, {"pred": None}, {"id": "x", "error": "bad clip"}]
    preds.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert bench.pred_letters(preds) == {"A": 1, "B": 2, "None": 2}
    from fastrl_table import _ms  # bench/ is on sys.path once bench/fastrl.py is loaded

    assert _ms([1.0, 2.0, 3.0]) == "2.0 [-0.5, 4.5]"  # mean ± t(0.975, 2) * s / sqrt(3) = 2 ± 4.303 / sqrt(3)
    assert _ms([1.5, None]) == "1.5 (n = 1)" and _ms([None]) == "n/a"


@pytest.mark.slow
def test_fastrl_bench_smoke(tiny_model_path, tmp_path, capsys):
    bench = _load()
    out = tmp_path / "bench"
    args = ["--seeds", "0", "--warmup-steps", "2", "--sft-steps", "3", "--rl-steps", "3", "--n-sft", "12", "--n-rl", "4", "--n-test", "4",
            "--prompts-per-step", "2", "--n", "4", "--eval-every", "2", "--max-new-tokens", "12", "--tau", "1.0",
            "--out", str(out)]  # model.path: tiny (the fixture points the cache at the session's tiny model)
    bench.main(args)
    res = json.loads((out / "results.json").read_text())[0]
    assert set(res["arms"]) == {"grpo", "grpo_fastrl", "dapo", "dapo_fastrl", "gspo", "gspo_fastrl"}
    for name, arm in res["arms"].items():
        assert [p["step"] for p in arm["points"]] == [0, 2, 3]  # the SFT start, every 2 steps, the end
        assert arm["points"][0]["acc"] == res["acc0"]  # every arm starts from the same checkpoint
        if name.endswith("_fastrl"):
            assert arm["kept_frac"] < 1.0  # τ = 1: one rollout per (prompt, advantage)
        else:
            assert arm["kept_frac"] == 1.0 and arm["rollouts_per_prompt"] >= 4.0
    table = (out / "table.md").read_text()
    assert "| GRPO + FastRL |" in table and "| DAPO + FastRL |" in table and "| GSPO + FastRL |" in table
    assert (out / "time_to_accuracy.png").stat().st_size > 0
    # the start point: the letter warm-up, then the reasoning SFT from it, on answer-first targets
    sft_cfg = (out / "seed0" / "sft" / "config.yaml").read_text()
    assert str(out / "seed0" / "warmup" / "final") in sft_cfg and "lr: 0.0003" in sft_cfg
    assert sum(res["sft_letters"].values()) == 4  # the SFT start's predicted letters over the 4 held-out clips
    first = json.loads((out / "seed0" / "world" / "train_reasoning.json").read_text())[0]
    assert first["meta"]["sft_response"][:3] in {"A. ", "B. ", "C. ", "D. "}
    capsys.readouterr()
    bench.main(args + ["--reuse-sft"])
    assert "reusing the SFT checkpoint" in capsys.readouterr().err
    bench.main(args + ["--reuse-sft", "--sft-only", "--out", str(tmp_path / "sft_only")])  # stops before RL
    assert "SFT held-out accuracy" in capsys.readouterr().out
    assert not (tmp_path / "sft_only" / "results.json").exists() and not (tmp_path / "sft_only" / "seed0" / "dapo").exists()
