"""Taking view sets to one's own videos (issue 42, item 4): what a user who brings new question types, a custom
transform or a wrong parameter is told."""
import sys
import textwrap

import pytest
import torch

from mmrl.errors import ConfigError
from mmrl.views import ViewSet
from views_testdata import VIEWS_DIR, make_sample


def load_text(tmp_path, text, name="myset"):
    p = tmp_path / f"{name}.yaml"
    p.write_text(textwrap.dedent(text))
    return ViewSet.load(p)


def test_qtypes_without_an_entry_are_named_and_counted():
    """bpo_video.yaml is keyed to the synthetic world: 3 'action' and 1 'cooking' samples get its default views."""
    vs = ViewSet.load(VIEWS_DIR / "bpo_video.yaml")
    samples = [make_sample("action", f"a{i}") for i in range(3)] + [make_sample("cooking", "c0"),
                                                                     make_sample("direction", "d0")]
    text = vs.fallback_warning(samples)
    assert text.startswith("view set 'bpo_video' (") and "bpo_video.yaml) has no entry for qtype 'action' (3), " \
        "'cooking' (1): these 4 samples get its 'default' views only: original (anchor), blank (abstain)" in text
    assert vs.fallback_warning([make_sample("direction", "d0"), make_sample("count", "c1")]) == ""


def test_no_warning_without_a_default_entry(tmp_path):
    """Without a 'default' entry nothing falls back: such a sample is a DataError naming it (views_for)."""
    vs = load_text(tmp_path, "qtypes:\n  direction: [{name: blank, role: abstain, transform: gray}]\n")
    assert vs.fallback_warning([make_sample("action")]) == ""


def test_wrong_transform_parameter_lists_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_text(tmp_path, "qtypes:\n  direction: [{name: n, role: stable, transform: noise, params: {fraction: 0.3}}]\n")
    assert "got an unexpected keyword argument 'fraction'; its parameters: std=" in str(e.value)


def test_module_function_import_failure_says_pythonpath(tmp_path):
    with pytest.raises(ConfigError, match=r"No module named 'my_own_views_xyz'; put the folder holding "
                                          r"'my_own_views_xyz' on the module path, e.g. `PYTHONPATH=. mmrl"):
        load_text(tmp_path, "qtypes:\n  c: [{name: x, role: stable, transform: 'my_own_views_xyz:f'}]\n")
    # a module that exists but fails inside on its own import is not a path problem: no PYTHONPATH hint
    (tmp_path / "broken_views_xyz.py").write_text("import no_such_dependency_xyz\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ConfigError) as e:
            load_text(tmp_path, "qtypes:\n  c: [{name: x, role: stable, transform: 'broken_views_xyz:f'}]\n")
    finally:
        sys.path.remove(str(tmp_path))
    assert "no_such_dependency_xyz" in str(e.value) and "PYTHONPATH" not in str(e.value)


def test_rollout_n_hint_is_a_common_multiple_of_the_view_counts(tmp_path):
    """5 views for one qtype and 2 for another: rollout.n=4 gets the hint 10 (not 5, which the 2-view qtype rejects)."""
    from mmrl.algos.spec import build_algorithm
    from mmrl.config import load_config
    from mmrl.train.plan import check_views_fit

    vs = load_text(tmp_path, """\
        qtypes:
          five:
            - {name: n1, role: stable, transform: noise}
            - {name: n2, role: stable, transform: noise, params: {std: 2.0}}
            - {name: n3, role: stable, transform: noise, params: {std: 3.0}}
            - {name: blank, role: abstain, transform: gray}
          two: [{name: blank, role: abstain, transform: gray}]
        """)
    cfg = load_config(None, ["algorithm.name=bpo"])
    spec = build_algorithm(cfg.algorithm, cfg)
    with pytest.raises(ConfigError, match=r"'rollout.n' = 4 .*\(five: 5, two: 2\).*e\.g\. rollout\.n=10 \(a multiple "
                                          r"of 10, the least common multiple\)"):
        check_views_fit(spec, 4, vs)
    with pytest.raises(ConfigError, match=r"e\.g\. rollout\.n=20 "):
        check_views_fit(spec, 12, vs)
    check_views_fit(spec, 10, vs)  # fits: no error


@pytest.fixture
def examples_on_path(monkeypatch):
    """docs/examples on the module path, as `PYTHONPATH=.` from that folder puts it (a `my_tools` / `my_views` an
    earlier test imported from elsewhere, e.g. the README's blocks run in a temporary folder, is forgotten first)."""
    from support import REPO

    for name in ("my_tools", "my_views"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    folder = str(REPO / "docs" / "examples")
    sys.path.insert(0, folder)
    yield REPO / "docs" / "examples"
    sys.path.remove(folder)


def test_worked_example_view_set_with_a_custom_transform(examples_on_path):
    """docs/examples/my_views.yaml: 'still' of an 8-frame clip at at=0.5 shows frame int(0.5 * 8) = 4 eight times."""
    from views_testdata import make_clip

    vs = ViewSet.load(examples_on_path / "my_views.yaml")
    assert sorted(vs.qtypes) == ["action", "object"]
    clip = make_clip(t=8)
    views = {v.name: v for v in vs.expand(make_sample("action", candidates=("waves", "sits"), answer="waves"), clip)}
    assert list(views) == ["original", "noise_mild", "still", "blank"]
    still = views["still"].media.frames
    assert all(torch.equal(still[i], clip.frames[4]) for i in range(8)) and views["still"].role == "sensitive"
    assert views["blank"].expected == "abstain" and views["original"].expected == "A"


def test_worked_example_tool(examples_on_path, tmp_path):
    from mmrl.tools import EpisodeState, ToolBudget, ToolError
    from mmrl.tools.suite import load_suite
    from views_testdata import make_clip

    (tmp_path / "suite.yaml").write_text("max_turns: 3\ntools:\n  - name: my_tools:clip_info\n")
    suite = load_suite(str(tmp_path / "suite.yaml"))
    assert list(suite.tools) == ["clip_info"]  # the decorated name
    spec = suite.tools["clip_info"]
    state = EpisodeState(sample=None, media=make_clip(t=8), budget=ToolBudget())
    assert spec.fn(state).text == "8 frames over 3.50 s"  # timestamps 0, 0.5, ..., 3.5
    with pytest.raises(ToolError, match="no video"):
        spec.fn(EpisodeState(sample=None, media=None, budget=ToolBudget()))
