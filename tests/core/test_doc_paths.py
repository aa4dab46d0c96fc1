"""Every module path the README and docs/ name in backticks (`mmrl/....py`) exists (issue 42: docs/bpo_miniature.md
named mmrl/train/view_metrics.py after it had moved to mmrl/rollout/)."""
import re

from support import REPO


def test_every_module_path_in_the_docs_exists():
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    missing = [(str(f.relative_to(REPO)), m.group(1)) for f in files
               for m in re.finditer(r"`(mmrl/[\w/]+\.py)`", f.read_text(encoding="utf-8"))
               if not (REPO / m.group(1)).is_file()]
    assert len(files) > 20 and not missing, missing
