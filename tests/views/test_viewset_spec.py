"""The view-set loader as a specification: every validation message written out whole (the set, the qtype and
the view it names), every branch of ``from_dict``/``_parse_qtype``/``_parse_view``, and what a parsed view holds.

The loader runs before any weights load, so its message is all a user sees of a bad file: each is pinned here
exactly (``str(error) == ...``), not by a fragment.
"""
import pytest

from mmrl.errors import ConfigError
from mmrl.views import ViewSet
from mmrl.views.transforms import transform_info
from mmrl.views.viewset import ROLES, ViewSpec

WHERE = "view set 'vs' (sets/vs.yaml)"
VIEW_KEYS = "['answer_map', 'answer_meta', 'effect', 'if_unchanged', 'name', 'params', 'role', 'transform', 'weight']"


def parse(data, name="vs", source="sets/vs.yaml", abstain_text=None):
    return ViewSet.from_dict(data, name=name, source=source, abstain_text=abstain_text)


def error(data, **kw):
    with pytest.raises(ConfigError) as e:
        parse(data, **kw)
    return str(e.value)


def one(view, q="color", **top):
    """A set with one qtype holding one view."""
    return {"qtypes": {q: [view]}, **top}


# ---- where the message points: the set's name and file -------------------------------------------------------

@pytest.mark.parametrize("data, kw, where", [
    ({"name": "named", "qtypes": {}}, {}, "view set 'named' (sets/vs.yaml)"),           # the file's own name wins
    ({"qtypes": {}}, {}, "view set 'vs' (sets/vs.yaml)"),                               # else the caller's name
    ({"qtypes": {}}, {"source": None}, "view set 'vs'"),                                # no file: no parentheses
    ({"qtypes": {}}, {"source": ""}, "view set 'vs'"),
    ([1, 2], {}, "view set 'vs' (sets/vs.yaml)"),                                       # not a mapping: the caller's
    (None, {"name": "n2"}, "view set 'n2' (sets/vs.yaml)"),
])
def test_errors_name_the_set_and_its_file(data, kw, where):
    msg = error(data, **kw)
    assert msg in (f"{where}: must be a mapping with a 'qtypes' key",
                   f"{where}: 'qtypes' must be a non-empty mapping of question type -> list of views")


@pytest.mark.parametrize("data, msg", [
    (None, "must be a mapping with a 'qtypes' key"),
    ([{"qtypes": {}}], "must be a mapping with a 'qtypes' key"),
    ("qtypes", "must be a mapping with a 'qtypes' key"),
    ({"qtype": {}, "name": "x"}, "unknown keys ['qtype']; allowed: ['abstain_text', 'name', 'qtypes', 'roles']"),
    ({"qtypes": {}, "zz": 1, "aa": 2}, "unknown keys ['aa', 'zz']; allowed: ['abstain_text', 'name', 'qtypes', 'roles']"),
    ({"name": "x"}, "'qtypes' must be a non-empty mapping of question type -> list of views"),
    ({"qtypes": {}}, "'qtypes' must be a non-empty mapping of question type -> list of views"),
    ({"qtypes": ["color"]}, "'qtypes' must be a non-empty mapping of question type -> list of views"),
    ({"qtypes": None}, "'qtypes' must be a non-empty mapping of question type -> list of views"),
])
def test_top_level_messages(data, msg):
    name = data.get("name", "vs") if isinstance(data, dict) else "vs"
    assert error(data) == f"view set '{name}' (sets/vs.yaml): {msg}"


def test_name_abstain_text_and_source_of_a_parsed_set():
    data = one({"name": "blank", "role": "abstain", "transform": "gray"})
    vs = parse(data)
    assert (vs.name, vs.abstain_text, vs.source) == ("vs", "cannot be determined", "sets/vs.yaml")
    vs = parse({**data, "name": "own", "abstain_text": "no idea"}, source="a/b.yaml")
    assert (vs.name, vs.abstain_text, vs.source) == ("own", "no idea", "a/b.yaml")
    vs = parse({**data, "abstain_text": "no idea"}, abstain_text="unanswerable")  # the run config's text wins
    assert vs.abstain_text == "unanswerable"
    vs = parse(data, name=None, source=None)
    assert (vs.name, vs.source) == ("views", None)
    assert parse({"qtypes": {7: [{"name": "s", "role": "stable", "transform": "gray"}]}}).qtypes.keys() == {"7"}


def test_declared_roles_are_accepted_and_listed():
    data = one({"name": "neg", "role": "negative", "transform": "gray"}, roles=["negative"])
    assert parse(data).qtypes["color"][1].role == "negative"
    msg = error(one({"name": "neg", "role": "negtive", "transform": "gray"}, roles=["negative"]))
    known = sorted(set(ROLES) | {"negative"})
    assert msg == (f"{WHERE}: qtype 'color', view 'neg': unknown role 'negtive'; known: {known} "
                   "(declare more under 'roles:')")
    assert "negative" not in ROLES  # a file's roles do not leak into the built-in set


# ---- a qtype -------------------------------------------------------------------------------------------------

STABLE = {"name": "s", "role": "stable", "transform": "gray"}


@pytest.mark.parametrize("entry, msg", [
    ([], "qtype 'color': needs a non-empty list of views"),
    ("gray", "qtype 'color': needs a non-empty list of views"),
    (None, "qtype 'color': needs a non-empty list of views"),
    ({"views": []}, "qtype 'color': needs a non-empty list of views"),
    ({"answer_map": {"a": "b"}}, "qtype 'color': needs a non-empty list of views"),
    ({"views": [STABLE], "view": []},
     "qtype 'color': unknown keys ['view']; allowed: ['answer_map', 'answer_meta', 'views']"),
    ([STABLE, {**STABLE, "name": "t"}, {**STABLE, "name": "t"}, STABLE],
     "qtype 'color': duplicate view names ['s', 't']"),
    ([{"name": "o1", "role": "anchor"}, STABLE, {"name": "o2", "role": "anchor"}],
     "qtype 'color': more than one anchor view (['o1', 'o2'])"),
    ([{**STABLE, "name": "original"}],
     "qtype 'color': has no anchor, and the name 'original' is taken by a non-anchor view"),
])
def test_qtype_messages(entry, msg):
    assert error({"qtypes": {"color": entry}}) == f"{WHERE}: {msg}"


def test_the_anchor_comes_first_and_one_is_made_when_none_is_declared():
    vs = parse({"qtypes": {"color": [STABLE, {"name": "mine", "role": "anchor"}, {**STABLE, "name": "t"}]}})
    assert [(s.name, s.role) for s in vs.qtypes["color"]] == [("mine", "anchor"), ("s", "stable"), ("t", "stable")]
    made = parse({"qtypes": {"color": [STABLE]}}).qtypes["color"][0]
    assert made == ViewSpec("original", "anchor", "identity")  # identity, unchanged, weight 1, no params or needs
    assert made.info is not None and made.info.fn is transform_info("identity").fn
    assert (made.effect, made.weight, made.params, made.needs, made.if_unchanged) == ("unchanged", 1.0, {}, (), None)
    # a single anchor (even named 'original') is kept as declared
    vs = parse({"qtypes": {"c": [{"name": "original", "role": "anchor", "transform": "identity"}, STABLE]}})
    assert [s.name for s in vs.qtypes["c"]] == ["original", "s"]


def test_qtype_level_answer_map_and_meta_reach_each_view_unless_it_has_its_own():
    qmap, vmap = {"left": "right", "right": "left"}, {"up": "down"}
    vs = parse({"qtypes": {"direction": {"answer_map": qmap, "answer_meta": "rev", "views": [
        {"name": "a", "role": "sensitive", "transform": "reverse"},
        {"name": "b", "role": "sensitive", "transform": "reverse", "answer_map": vmap, "answer_meta": "other"},
    ]}}})
    a, b = vs.qtypes["direction"][1:]
    assert (a.answer_map, a.answer_meta) == (qmap, "rev")
    assert (b.answer_map, b.answer_meta) == (vmap, "other")
    c = parse({"qtypes": {"d": {"answer_meta": "rev", "views": [{"name": "c", "role": "sensitive",
                                                                 "transform": "reverse"}]}}}).qtypes["d"][1]
    assert (c.answer_map, c.answer_meta, c.effect) == (None, "rev", "mapped")  # answer_meta alone is enough


# ---- a view --------------------------------------------------------------------------------------------------

AT = f"{WHERE}: qtype 'color', view 'v'"


@pytest.mark.parametrize("view, msg", [
    ("gray", f"{WHERE}: qtype 'color', view #1: must be a mapping"),
    ({"role": "stable"}, f"{WHERE}: qtype 'color', view #1: needs a string 'name' (quote names like \"null\")"),
    ({"name": "", "role": "stable"}, f"{WHERE}: qtype 'color', view #1: needs a string 'name' (quote names like \"null\")"),
    ({"name": None, "role": "stable"}, f"{WHERE}: qtype 'color', view #1: needs a string 'name' (quote names like \"null\")"),
    ({"name": 3, "role": "stable"}, f"{WHERE}: qtype 'color', view #1: needs a string 'name' (quote names like \"null\")"),
    ({"name": "v", "role": "stable", "colour": 1, "alpha": 2},
     f"{AT}: unknown keys ['alpha', 'colour']; allowed: {VIEW_KEYS}"),
    ({"name": "v", "role": "stable", "transform": "gray", "params": [128]}, f"{AT}: 'params' must be a mapping"),
    ({"name": "v", "role": "stable", "transform": "gray", "params": {"colour": 3}},
     f"{AT}: bad params {{'colour': 3}} for transform 'gray': got an unexpected keyword argument 'colour'; its parameters: value=128"),
    ({"name": "v", "role": "stable", "transform": "gray", "effect": "sideways"},
     f"{AT}: unknown effect 'sideways'; known: ['unchanged', 'mapped', 'destroyed', 'unknown']"),
    ({"name": "v", "role": "stable", "transform": "gray", "answer_meta": 3},
     f"{AT}: 'answer_meta' must name a key of the sample's meta"),
    ({"name": "v", "role": "stable", "transform": "gray", "answer_map": ["left", "right"]},
     f"{AT}: 'answer_map' must map candidate text to candidate text"),
    ({"name": "v", "role": "stable", "transform": "gray", "answer_map": {"left": 1}},
     f"{AT}: 'answer_map' must map candidate text to candidate text"),
    ({"name": "v", "role": "stable", "transform": "gray", "answer_map": {1: "left"}},
     f"{AT}: 'answer_map' must map candidate text to candidate text"),
    ({"name": "v", "role": "sensitive", "transform": "reverse"},
     f"{AT}: transform 'reverse' maps the answer; give an 'answer_map' (or 'answer_meta') or an explicit 'effect'"),
    ({"name": "v", "role": "sensitive", "transform": "reverse", "answer_map": {}},
     f"{AT}: transform 'reverse' maps the answer; give an 'answer_map' (or 'answer_meta') or an explicit 'effect'"),
    ({"name": "v", "role": "sensitive", "transform": "gray", "effect": "mapped"},
     f"{AT}: transform 'gray' maps the answer; give an 'answer_map' (or 'answer_meta') or an explicit 'effect'"),
    ({"name": "v", "role": "anchor", "transform": "gray"},
     f"{AT}: the anchor view shows the original media; its transform must be 'identity'"),
    ({"name": "v", "role": "abstain", "transform": "shuffle"},
     f"{AT}: role 'abstain' needs effect 'destroyed' (got 'unknown')"),
    ({"name": "v", "role": "abstain", "transform": "gray", "effect": "unchanged"},
     f"{AT}: role 'abstain' needs effect 'destroyed' (got 'unchanged')"),
    ({"name": "v", "role": "stable", "transform": "gray", "weight": "heavy"}, f"{AT}: 'weight' must be a number"),
    ({"name": "v", "role": "stable", "transform": "gray", "weight": None}, f"{AT}: 'weight' must be a number"),
    ({"name": "v", "role": "stable", "transform": "gray", "weight": [1]}, f"{AT}: 'weight' must be a number"),
    ({"name": "v", "role": "stable", "transform": "gray", "weight": -0.5}, f"{AT}: 'weight' must be >= 0, got -0.5"),
    ({"name": "v", "role": "stable", "transform": "gray", "weight": float("nan")}, f"{AT}: 'weight' must be >= 0, got nan"),
    ({"name": "v", "role": "anchor", "weight": 2}, f"{AT}: the anchor's weight is fixed at 1 (weigh the other views)"),
    ({"name": "v", "role": "anchor", "weight": 0}, f"{AT}: the anchor's weight is fixed at 1 (weigh the other views)"),
    ({"name": "v", "role": "stable", "transform": "gray", "if_unchanged": "drop"},
     f"{AT}: 'if_unchanged' must be one of ['error', 'skip', 'keep'], got 'drop'"),
    ({"name": "v", "role": "stable", "transform": "gray", "if_unchanged": True},
     f"{AT}: 'if_unchanged' must be one of ['error', 'skip', 'keep'], got True"),
])
def test_view_messages(view, msg):
    assert error({"qtypes": {"color": [{"name": "first", "role": "stable", "transform": "gray"}, view]}}) == msg


def test_unknown_role_and_transform_messages():
    known = sorted(ROLES)
    assert error(one({"name": "v", "role": "bystander"})) == (
        f"{AT}: unknown role 'bystander'; known: {known} (declare more under 'roles:')")
    assert error(one({"name": "v"})) == f"{AT}: unknown role None; known: {known} (declare more under 'roles:')"
    msg = error(one({"name": "v", "role": "stable", "transform": "warp_drive"}))
    assert msg.startswith(f"{AT}: unknown view transform 'warp_drive'; ") and msg.endswith("(or give module:function)")
    assert "known: " in msg and "reverse" in msg


@pytest.mark.parametrize("weight", [0, 0.0, 2.5, "0.25"])
def test_weights_zero_and_above_are_kept_as_floats(weight):
    s = parse(one({"name": "v", "role": "stable", "transform": "gray", "weight": weight})).qtypes["color"][1]
    assert s.weight == float(weight) and isinstance(s.weight, float)


def test_a_parsed_view_holds_every_declared_field():
    amap = {"left": "right"}
    v = {"name": "v", "role": "sensitive", "transform": "mask_segment", "params": {"frac": [0.25, 0.5], "fill": "gray"},
         "effect": "mapped", "answer_map": amap, "answer_meta": "rev", "weight": 0.5, "if_unchanged": "skip"}
    s = parse(one(v)).qtypes["color"][1]
    assert (s.name, s.role, s.transform, s.params, s.effect, s.answer_map, s.answer_meta, s.weight, s.if_unchanged) == \
        ("v", "sensitive", "mask_segment", {"frac": [0.25, 0.5], "fill": "gray"}, "mapped", amap, "rev", 0.5, "skip")
    assert s.info.fn is transform_info("mask_segment").fn and s.needs == ()
    assert s.params is not v["params"]  # a copy: the file's dict may be reused
    ev = parse(one({"name": "v", "role": "sensitive", "transform": "mask_evidence"})).qtypes["color"][1]
    assert (ev.effect, ev.needs, ev.weight, ev.if_unchanged, ev.params) == ("destroyed", ("segments",), 1.0, None, {})


def test_defaults_of_a_view_without_optional_keys():
    s = parse(one({"name": "v", "role": "stable", "params": None})).qtypes["color"]
    assert [x.name for x in s] == ["original", "v"]
    v = s[1]
    assert (v.transform, v.params, v.effect, v.answer_map, v.answer_meta, v.weight, v.needs, v.if_unchanged) == \
        ("identity", {}, "unchanged", None, None, 1.0, (), None)
    # the view's own effect overrides the transform's declared one
    assert parse(one({"name": "v", "role": "stable", "transform": "reverse", "effect": "unchanged"})
                 ).qtypes["color"][1].effect == "unchanged"
    # an explicit anchor at weight 1 and with the identity transform (default or named) is accepted
    for anchor in ({"name": "o", "role": "anchor"}, {"name": "o", "role": "anchor", "transform": "identity",
                                                      "weight": 1}):
        assert parse(one(anchor)).qtypes["color"][0].name == "o"


def test_load_names_the_file_and_records_it(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text("qtypes:\n  color: [{name: g, role: stable, transform: gray}]\n")
    vs = ViewSet.load(p)
    assert (vs.name, vs.source) == ("mine", str(p))
    assert ViewSet.load(str(p), abstain_text="no idea").abstain_text == "no idea"
    p.write_text("qtypes:\n  color: [{name: g, role: stable, transform: warp}]\n")
    with pytest.raises(ConfigError, match=rf"^view set 'mine' \({p}\): qtype 'color', view 'g': unknown view "):
        ViewSet.load(p)
    missing = tmp_path / "none.yaml"
    with pytest.raises(ConfigError) as e:
        ViewSet.load(missing)
    assert str(e.value).startswith(f"view set file '{missing}': cannot read: ") and "No such file" in str(e.value)
    p.write_text("qtypes: [unclosed\n")
    with pytest.raises(ConfigError) as e:
        ViewSet.load(p)
    assert str(e.value).startswith(f"view set file '{p}': cannot read: ") and "while parsing" in str(e.value)
