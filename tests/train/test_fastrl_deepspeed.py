"""FastRL under DeepSpeed, 2 CPU ranks: MDAP runs on the gathered global batch, so the kept set (and with it the
losses, gradients and weights) equals the 1-process run's once that run pads to the same multiple (``pad_to=2``)."""
import pytest

from test_deepspeed_cpu import assert_same_run, launch, needs_deepspeed, reference, rows, setup  # noqa: F401

FASTRL = ["algorithm.name=fastrl", "algorithm.params={base: grpo, tau: 1.0, total_steps: 3}"]


@pytest.mark.slow
@needs_deepspeed
def test_zero2_fastrl_kept_set_matches_single_process(setup):  # noqa: F811
    root, cfg = setup
    ref = reference(root, cfg, "fastrl", FASTRL + ["algorithm.params.pad_to=2"])
    out = root / "zero2_fastrl"
    launch(cfg, out, FASTRL)  # pad_to = 0: the 2 ranks of the run
    assert_same_run(ref, out)
    a, b = rows(ref), rows(out)
    keys = ("train_frac", "algo/fastrl/kept_rows", "algo/fastrl/pruned_rows", "algo/fastrl/padded_rows",
            "algo/fastrl/b_mean", "algo/fastrl/b_max", "algo/fastrl/rollout_n")
    for x, y in zip(a, b):
        for key in keys:
            assert x[key] == y[key], (x["step"], key, x[key], y[key])
        assert y["algo/fastrl/kept_rows"] % 2 == 0
    assert any(r["algo/fastrl/pruned_rows"] > 0 for r in a), "nothing was pruned: the test would prove nothing"
