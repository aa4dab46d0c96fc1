"""Smoke run of bench/decode_speed.py on the tiny model: both arms, the same tokens, one table row per length."""
from support import load_bench


def test_decode_speed_smoke(tiny_model_path, tmp_path):
    bench = load_bench("decode_speed")
    table = bench.main(["--lengths", "3", "6", "--models", "tiny", "--reps", "2", "--prompts", "2", "--n", "2",
                        "--cache", str(tmp_path)])
    rows = [line for line in table.splitlines() if line.startswith("| tiny |")]
    assert [r.split(" | ")[1] for r in rows] == ["3", "6"]
    assert all(" | yes | " in r for r in rows)  # the fast decode drew the eager decode's tokens
