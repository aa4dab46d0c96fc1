"""The base's per-attribute table: each attribute scored on its own items (letters for choices, exact text for
captions), with chance and the standard error, through the real step inputs and a scripted engine."""
from types import SimpleNamespace

import pytest

from mmrl.config import Config
from mmrl.data.schema import LETTERS
from mmrl.data.synth_perception import make_perception_corpus
from mmrl.models.base_recipe import PERCEPTION_ATTRS, BaseRecipe


class ScriptedEngine:
    """Answers the gold (its letter, or a caption's text) except on ``wrong`` question types."""

    def __init__(self, samples, wrong=()):
        self.by_id, self.wrong = {s.id: s for s in samples}, set(wrong)

    def generate(self, requests, params):
        out = []
        for r in requests:
            s = self.by_id[r.sample_id]
            text = (LETTERS[s.answer_index] if s.is_choice else s.answer) if s.qtype not in self.wrong else "Z"
            out.append(SimpleNamespace(sample_id=r.sample_id, group_id=r.group_id, view=r.view, role=r.role,
                                       expected=r.expected, text=text))
        return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("perception")
    make_perception_corpus(str(out), 4, 33, BaseRecipe().mix, seed=1, size=56, codec="mpeg4")
    return out


def test_each_attribute_is_scored_on_its_own_items(corpus, tiny_model_path, monkeypatch):
    from mmrl.data.annotations import load_samples
    from mmrl.eval import perception
    from mmrl.models.loading import load_processor

    samples, _ = load_samples(str(corpus / "test.json"), None)
    monkeypatch.setattr(perception, "build_engine",
                        lambda *a, **k: ScriptedEngine(samples, wrong=("caption", "time")))
    cfg = Config()
    cfg.data.nframes, cfg.data.max_pixels = 8, 56 * 56
    rows = perception.evaluate_perception(SimpleNamespace(eval=lambda: None), load_processor(tiny_model_path),
                                          str(corpus / "test.json"), cfg.data)
    assert set(rows) == set(PERCEPTION_ATTRS) | {"macro"}
    for q in PERCEPTION_ATTRS:
        assert rows[q]["acc"] == (0.0 if q in ("caption", "time") else 1.0), q
        assert rows[q]["n"] == sum(s.qtype == q for s in samples)
    assert rows["caption"]["chance"] == 0.0 and rows["yesno"]["chance"] == 0.5
    assert rows["color"]["se"] == 0.0 and rows["macro"]["acc"] == pytest.approx(9 / 11)
    table = perception.perception_table(rows, "t")
    assert f"| yesno | 100.0 | 0.0 | 50.0 | {rows['yesno']['n']} |" in table and "| **macro** | 81.8 |" in table
