"""bench/dspo.py: the table (mean ± 95% CI, per-seed values, per-seed direction with KL lower-is-better) on made-up
results, and a smoke run of every arm at plumbing scale (slow)."""
import json

import pytest
from support import load_bench


def _load():
    return load_bench("dspo")


def test_table_directions():
    bench = _load()
    res = {}
    for s in range(3):
        res[s] = {a: {k: 0.5 for k in bench.METRICS} for a in bench.ARMS}
        res[s]["dspo"]["top1"] = 0.5 + 0.1 * (s + 1)  # +0.1, +0.2, +0.3 over every other arm
        res[s]["dspo"]["kl_to_annotators"] = 0.4  # lower: better
        res[s]["grpo"]["r_cf"] = float("nan")
    text = bench.table(res)
    assert "| top1 | 0.500 ± 0.000 (0.500, 0.500, 0.500) | 0.700 ± 0.248 (0.600, 0.700, 0.800) |" in text
    assert "| dspo − grpo | top1 | +0.100, +0.200, +0.300 | 0.200 ± 0.248 | 3 / 0 / 0 |" in text
    assert "| dspo − no_dedr | kl_to_annotators | -0.100, -0.100, -0.100 | -0.100 ± 0.000 | 3 / 0 / 0 |" in text
    assert "| dspo − no_cvig | box_iou | +0.000, +0.000, +0.000 | 0.000 ± 0.000 | 0 / 0 / 3 |" in text
    assert "| r_cf | n/a (n/a, n/a, n/a) |" in text


@pytest.mark.slow
def test_dspo_bench_smoke(tiny_model_path, tmp_path):
    bench = _load()
    out = tmp_path / "b"
    bench.main(["--seeds", "0", "--sft-steps", "2", "--rl-steps", "1", "--n-train", "4", "--n-test", "2", "--n", "2",
                "--prompts-per-step", "2", "--max-new-tokens", "6", "--out", str(out)])
    res = json.loads((out / "seed0" / "results.json").read_text())
    assert set(res) == set(bench.ARMS) and all(r["n"] == 2 for r in res.values())
    assert res["grpo"]["r_cf"] != res["grpo"]["r_cf"] and res["dspo"]["r_cf"] == res["dspo"]["r_cf"]  # nan: no CVIG
    assert (out / "table.md").read_text().startswith("| metric | grpo | dspo | no_cvig | no_dedr |")
    bench.main(["--seeds", "0", "--out", str(out), "--table-only"])  # rebuilt from results.json alone
