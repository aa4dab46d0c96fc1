"""Inside mmrl/eval imports point one way too: definitions and scorers -> frame rules, hooks registry and driver ->
the benchmarks' hook files -> protocol resolution and the generic runner -> the command-line glue. A benchmark's
package (``benchmarks/<name>/``) holds its reading and scoring (rank 1), its hooks (rank 2) and, for OVO-Bench, the
streaming run over the generic runner (rank 3)."""
import ast
from pathlib import Path

EVAL = Path(__file__).resolve().parents[2] / "mmrl" / "eval"
RANK = {"benchmark_def": 0, "parsers": 0, "report": 0, "synthetic": 0, "synth_bench": 0, "__init__": 0,
        "benchmarks.emotion.metrics": 0,
        "benchmarks.mvbench.data": 1, "benchmarks.mvbench.protocol": 1, "benchmarks.ovobench.protocol": 1,
        "benchmarks.ovobench.score": 1, "frame_rules": 1, "hooks": 1, "driver": 1, "benchmarks.emotion.evaluate": 1,
        "benchmarks": 2, "protocol": 3, "runner": 3, "benchmarks.ovobench.stream": 3, "cli_bench": 4,
        "perception": 4}


def _rank(rel: str) -> int:
    """The rank of ``rel`` (a module path under mmrl/eval, dotted): its longest prefix in ``RANK``."""
    parts = rel.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in RANK:
            return RANK[".".join(parts[:n])]
    raise AssertionError(f"mmrl/eval/{rel} has no rank in {__file__}")


def test_eval_modules_import_downward_only():
    bad = []
    for path in sorted(EVAL.rglob("*.py")):
        parts = path.relative_to(EVAL).with_suffix("").parts
        own = _rank(".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mmrl.eval."):
                if _rank(node.module[len("mmrl.eval."):]) > own:
                    bad.append(f"{path.relative_to(EVAL)}:{node.lineno} imports {node.module}")
    assert not bad, "\n".join(bad)
