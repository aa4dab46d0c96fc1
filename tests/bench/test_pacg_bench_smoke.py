"""Smoke run of bench/pacg.py: one seed, every arm, a tiny claims world, a few SFT and RL steps (plumbing only)."""
import json

import pytest
from support import load_bench


def _load():
    return load_bench("pacg")


@pytest.mark.slow
def test_pacg_bench_smoke(tiny_model_path, tmp_path, capsys):
    bench = _load()
    out = tmp_path / "bench"
    args = ["--seeds", "0", "--warmup-steps", "2", "--sft-steps", "2", "--rl-steps", "2", "--n-train", "8", "--n-test", "3",
            "--prompts-per-step", "2", "--n", "2", "--max-new-tokens", "6", "--smoke", "--out", str(out), f"model.path={tiny_model_path}"]
    table = bench.main(args + ["--report", str(tmp_path / "report.md")])
    for arm in bench.DEFAULT_ARMS:
        assert f"| {arm} |" in table
    res = json.loads((out / "seed0.json").read_text())
    assert set(res["arms"]) == set(bench.DEFAULT_ARMS)
    # every arm started from the same SFT checkpoint and ran the algorithm it names
    for arm, r in res["arms"].items():
        cfg = (out / "seed0" / arm.replace("+", "_") / "final" / "config.json")
        assert cfg.exists()
        assert r["eval"]["n_responses"] == 3.0
        assert "persistence_mean_full" in r["eval"] and "efs_token_mean_full" in r["eval"]  # also under full_mask
    assert any(k.startswith("algo/pacg/") for k in res["arms"]["dapo+pacg"]["last_algo_metrics"])
    assert any(k.startswith("algo/vppo/") for k in res["arms"]["vppo+pacg"]["last_algo_metrics"])
    assert not any(k.startswith("algo/pacg/") for k in res["arms"]["dapo"]["last_algo_metrics"])
    assert "× dapo" in table and "× vppo" in table
    warm = json.loads((out / "warmup_world" / "train.json").read_text())
    assert all("sft_response" not in it["meta"] for it in warm)  # the warm-up trains letters, the SFT the traces
    assert (out / "warmup" / "final" / "config.json").exists()
    assert bench.main(args + ["--render-only"]) == table
    assert "PACG gate activity" in table and "| dapo+pacg |" in table.split("PACG gate activity")[1]
    # adding an arm to the earlier run trains only that arm; the others are kept as they were
    more = bench.main(args + ["--arms", "dapo", "dapo+pacg_q", "dapo+pacg_full"])
    again = json.loads((out / "seed0.json").read_text())
    assert again["arms"]["dapo"] == res["arms"]["dapo"]
    assert again["arms"]["dapo+pacg_q"]["side_by_side"] == ["dapo+pacg_q", "dapo+pacg_full"]
    assert "| dapo+pacg_q |" in more and "| dapo+pacg_full − dapo |" in more
    # without --smoke, 6 new tokens cannot hold the 50-token SFT traces: refused before any training
    with pytest.raises(ValueError, match=r"max_new_tokens = 6 does not exceed the longest SFT trace"):
        bench.main([a for a in args if a != "--smoke"] + ["--out", str(tmp_path / "refused")])
