"""Shared fixtures for the eval tests: the OVO-Bench fixture lives outside the repo (licensed data)."""
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# ../shared next to the checkout (a worktree may sit one folder deeper: the nearest ancestor holding it)
OVO_DIR = next((p / "shared" / "fixtures" / "ovo_bench" for p in REPO_ROOT.parents
                if (p / "shared" / "fixtures" / "ovo_bench").is_dir()), REPO_ROOT.parent / "shared" / "fixtures" / "ovo_bench")


@pytest.fixture
def ovo_dir() -> Path:
    if not (OVO_DIR / "ovo_bench_new.json").is_file():
        pytest.skip(f"OVO-Bench fixture folder {OVO_DIR} is missing (licensed data is not in the repo): put the "
                    f"official ovo_bench_new.json and the published Gemini-1.5-Pro offline result files from the "
                    f"OVO-Bench repository (JoeLeelyf/OVO-Bench) there, or check out the project's shared/ folder beside "
                    f"this clone; tests/eval/test_eval_ovo_small.py covers the scorer without it")
    return OVO_DIR


@pytest.fixture(scope="module")
def tiny():
    """The embedded tiny model loaded for evaluation: (processor, HF engine)."""
    from mmrl.eval.cli_bench import load_for_eval  # noqa: I001

    model, processor, engine = load_for_eval("tiny", device="cpu")
    return processor, engine
