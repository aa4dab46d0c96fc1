"""The base's recipe: its hash names the cache, every field is in it, and bad recipes fail before any work."""
from dataclasses import fields

import pytest

from mmrl.errors import ConfigError
from mmrl.models.base_recipe import (
    BaseRecipe,
    base_path,
    load_recipe,
    recipe_from_dict,
    recipe_hash,
    resolve_base,
)


def _changed(name: str, value):
    """Another valid value of the field."""
    if name == "mix":
        return dict(value, color=value["color"] + 1.0)
    if isinstance(value, bool):
        return not value
    if isinstance(value, float):
        return value * 0.5 + 0.01
    return {"size": value + 28, "seed": value + 1}.get(name, value * 2)


def test_the_hash_changes_when_any_field_changes():
    r = BaseRecipe()
    h = recipe_hash(r)
    assert h == recipe_hash(BaseRecipe()) and len(h) == 12
    seen = {h}
    for f in fields(BaseRecipe):
        other = recipe_from_dict({**r.to_dict(), f.name: _changed(f.name, getattr(r, f.name))})
        d = recipe_hash(other)
        assert d not in seen, f"changing {f.name} left the hash at {d}"
        seen.add(d)


def test_the_mix_order_does_not_change_the_hash():
    a = BaseRecipe()
    b = BaseRecipe(mix=dict(reversed(list(a.mix.items()))))
    assert recipe_hash(a) == recipe_hash(b)


def test_overrides_and_yaml(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text("steps: 10\nmix: {color: 1, null: 2}\n")
    r = load_recipe(f, ["n_train=16", "mix.shape=3"])
    assert (r.steps, r.n_train, r.mix) == (10, 16, {"color": 1.0, "null": 2.0, "shape": 3.0})


@pytest.mark.parametrize("data,msg", [
    ({"stepz": 3}, "unknown key"),
    ({"mix": {"colour": 1}}, "unknown attribute"),
    ({"mix": {"color": 0}}, "every weight is 0"),
    ({"size": 100}, "multiple of 28"),
    ({"n_frames": 6}, "'n_frames'"),
    ({"steps": "many"}, "'steps'"),
    ({"steps": 0}, "'steps' must be >= 1"),
    ({"fixed_options": "no"}, "'fixed_options' = 'no' is not a bool"),
    ({"direct_rate": 1.5}, "'direct_rate' must be in"),
])
def test_bad_recipes_are_one_line_errors(data, msg):
    with pytest.raises(ConfigError, match=msg):
        recipe_from_dict(data)


def test_model_path_base_resolves_only_to_a_built_base(tmp_path, monkeypatch):
    monkeypatch.setenv("MMRL_CACHE", str(tmp_path))
    from mmrl.models.loading import resolve_model_path
    from mmrl.validate import check_model_path

    with pytest.raises(ConfigError, match="mmrl base build"):
        resolve_model_path("base")
    with pytest.raises(ConfigError, match="not built"):
        check_model_path("base:0123456789ab")
    with pytest.raises(ConfigError, match=r"^--model = 'base:0123456789ab': the base model 0123456789ab is not built"):
        check_model_path("base:0123456789ab", "--model")
    folder = base_path("0123456789ab")
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "mmrl_base_recipe.json").write_text("{}")
    assert resolve_model_path("base:0123456789ab") == str(folder) == resolve_base("base:0123456789ab")
    check_model_path("base:0123456789ab")


def test_cli_hash_and_a_bad_recipe_key(tmp_path, monkeypatch, capsys):
    from mmrl.cli import main

    monkeypatch.setenv("MMRL_CACHE", str(tmp_path))
    assert main(["base", "hash", "steps=10"]) == 0
    digest = recipe_hash(BaseRecipe(steps=10))
    assert capsys.readouterr().out.strip() == f"{digest}  {tmp_path / f'base-{digest}'}  (not built; model.path: base:{digest})"
    assert main(["base", "build", "stepz=10"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mmrl: error: base recipe: unknown key(s) ['stepz']") and "\n" not in err
