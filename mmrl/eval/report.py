"""Run reports for benchmark evaluations: ``summary.json`` + ``summary.md``, and resumable JSONL responses.

Every report names the protocol and the parser(s) that produced its scores (specs/benchmarks.md,
"Implementation advice": record which parser produced each score) and lists and counts the errors (failed
generations, unreadable media), which score 0 as in the official harnesses (a ``None`` response).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from mmrl.errors import DataError


def collect_errors(records: Iterable[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """``[{id, task, error}]`` of records that carry a non-empty ``error``."""
    return [{"id": r.get("id"), "task": r.get("task"), "error": str(r["error"])}
            for r in records if r.get("error")]


def build_summary(benchmark: str, protocol: str, parser: Union[str, Mapping[str, Any]], scores: Mapping[str, Any],
                  records: Optional[Iterable[Mapping[str, Any]]] = None,
                  errors: Optional[List[Mapping[str, Any]]] = None,
                  meta: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The summary dict written to ``summary.json``.

    ``scores`` is what the benchmark's ``score`` hook returned; ``errors`` adds to those found in ``records``.
    """
    errs = collect_errors(records or []) + [dict(e) for e in (errors or [])]
    return {"benchmark": benchmark, "protocol": protocol, "parser": parser, "scores": dict(scores),
            "n_errors": len(errs), "errors": errs, "meta": dict(meta or {}),
            "created": time.strftime("%Y-%m-%d %H:%M:%S")}


def markdown(summary: Mapping[str, Any], table: str = "") -> str:
    """The markdown report: header (benchmark, protocol, parser, errors), the hooks' score table, error list."""
    parser = summary["parser"]
    if isinstance(parser, Mapping):
        parser = ", ".join(f"{k}: {v}" for k, v in parser.items())
    lines = [f"# {summary['benchmark']}", "", f"- protocol: {summary['protocol']}", f"- parser: {parser}",
             f"- errors: {summary['n_errors']}", ""]
    if table:
        lines.append(table.rstrip("\n"))
    if summary["errors"]:
        lines += ["", "## Errors (scored 0)", "", "| id | task | error |", "|---|---|---|"]
        for e in summary["errors"]:
            lines.append(f"| {e.get('id')} | {e.get('task')} | {str(e.get('error')).replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def write_report(out_dir: Union[str, Path], summary: Mapping[str, Any], table: str = "",
                 name: str = "summary") -> Dict[str, str]:
    """Write ``<out_dir>/<name>.json`` and ``<out_dir>/<name>.md`` (with ``table``); returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jpath, mpath = out / f"{name}.json", out / f"{name}.md"
    jpath.write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    mpath.write_text(markdown(summary, table), encoding="utf-8")
    return {"json": str(jpath), "md": str(mpath)}


# --- resumable responses -----------------------------------------------------------------------------------------
def append_jsonl(path: Union[str, Path], record: Mapping[str, Any]) -> None:
    """Append one record (one line) and flush, so a killed run loses at most the line being written."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Union[str, Path]) -> List[Dict[str, Any]]:
    """All records; a torn last line (an interrupted write) is skipped, a bad line elsewhere is a DataError."""
    p = Path(path)
    if not p.exists():
        return []
    lines = p.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                break
            raise DataError(f"line {i + 1} is not valid JSON: {e}", path=str(p)) from None
    return out


def responses_by_id(path: Union[str, Path]) -> Dict[str, Dict[str, Any]]:
    """The last record per ``id`` (a rerun of a query replaces the earlier answer)."""
    return {str(r["id"]): r for r in read_jsonl(path) if "id" in r}
