"""docs/reference/ is generated from the registries (mmrl/reference.py): a committed page that differs from what
the code generates, or a registered name missing from its page, fails here. Fix: run `mmrl docs` and commit."""
import pytest

from mmrl.cli import main
from mmrl.reference import HEADER, OUT_DIR, PAGES, generate, page


def test_committed_pages_are_current():
    stale = [name for name, text in generate().items()
             if not (OUT_DIR / name).exists() or (OUT_DIR / name).read_text() != text]
    assert not stale, f"docs/reference is stale: {stale} (run `mmrl docs` and commit docs/reference/)"


def _registered():
    from mmrl.algos import ALGORITHMS, POLICY_LOSSES
    from mmrl.eval.frame_rules import FRAME_RULES
    from mmrl.eval.parsers import PARSERS
    from mmrl.reference import REPO
    from mmrl.rewards import REWARDS
    from mmrl.rollout.agent_loop import AGENT_LOOPS
    from mmrl.tools import TOOLS
    from mmrl.views.transforms import VIEW_TRANSFORMS

    def names(reg):  # every built-in (tests may register more); tests/core/test_registries.py checks the list is whole
        return reg.builtin_names()

    return {"views": names(VIEW_TRANSFORMS), "rewards": names(REWARDS), "tools": names(TOOLS),
            "algorithms": names(ALGORITHMS) + names(POLICY_LOSSES), "agent_loops": names(AGENT_LOOPS),
            "benchmarks": names(FRAME_RULES) + names(PARSERS) + [p.stem for p in (REPO / "eval").glob("*.yaml")]}


def test_every_registered_name_is_documented():
    registered = _registered()
    assert set(registered) == set(PAGES)
    missing = [(kind, name) for kind, names in registered.items() for name in names
               if f"| `{name}` |" not in (OUT_DIR / f"{kind}.md").read_text()]
    assert not missing, f"registered but not in docs/reference: {missing}"
    assert len(registered["rewards"]) >= 13 and "region_blur" in registered["views"]


def test_an_undocumented_entry_is_refused(monkeypatch):
    from mmrl.errors import ConfigError
    from mmrl.rewards import REWARDS

    def undocumented(ctx):
        return [0.0 for _ in ctx]

    monkeypatch.setitem(REWARDS._builtin_module, "zz_undocumented", __name__)  # as if a built-in
    REWARDS.register("zz_undocumented")(undocumented)
    try:
        with pytest.raises(ConfigError, match="reward 'zz_undocumented' has no docstring"):
            page("rewards")
    finally:
        REWARDS._items.pop("zz_undocumented")


@pytest.mark.parametrize("kind", sorted(PAGES))
def test_mmrl_list_prints_the_page(kind, capsys):
    assert main(["list", kind]) == 0
    assert HEADER + capsys.readouterr().out == (OUT_DIR / f"{kind}.md").read_text()


def test_docs_check(capsys):
    assert main(["docs", "--check"]) == 0
