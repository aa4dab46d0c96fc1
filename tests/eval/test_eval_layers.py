"""Inside mmrl/eval imports point one way too: definitions and scorers -> frame rules, hooks registry and driver ->
the benchmarks' hook files -> protocol resolution and the generic runner -> the command-line glue."""
import ast
from pathlib import Path

EVAL = Path(__file__).resolve().parents[2] / "mmrl" / "eval"
RANK = {"benchmark_def": 0, "parsers": 0, "report": 0, "synthetic": 0, "synth_bench": 0, "emotion": 0,
        "mvbench_data": 1, "mvbench_protocol": 1, "ovobench_protocol": 1, "ovobench_score": 1, "frame_rules": 1,
        "hooks": 1, "driver": 1, "emotion_eval": 1, "benchmarks": 2, "protocol": 3, "runner": 3, "ovobench_stream": 3, "cli_bench": 4, "perception": 4, "__init__": 0}


def _rank(module: str) -> int:
    return RANK[module.split(".")[2]] if module.startswith("mmrl.eval.") else -1


def test_eval_modules_import_downward_only():
    bad = []
    for path in sorted(EVAL.rglob("*.py")):
        own = path.relative_to(EVAL).parts[0].removesuffix(".py")
        assert own in RANK, f"mmrl/eval/{own} has no rank in {__file__}"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and _rank(node.module) > RANK[own]:
                bad.append(f"{path.relative_to(EVAL)}:{node.lineno} imports {node.module}")
    assert not bad, "\n".join(bad)
