"""The scripted reader of bench/vhop_agent.py: it follows emblems only through images a tool returned, re-queries
with the next wanted image, never repeats a search, and answers the chain's end (the agentic arms' only agent)."""
import json
from types import SimpleNamespace

from support import load_bench


def _reader():
    return load_bench("vhop_agent")


def _m(colour, shape, emblem=None, scene=("navy", "plain")):
    return {"main": {"colour": colour, "shape": shape}, "scene": {"colour": scene[0], "ground": scene[1]},
            "emblem": None if emblem is None else {"colour": emblem[0], "shape": emblem[1]}}


META = {"a": _m("red", "circle", ("blue", "square")), "b": _m("blue", "square", ("green", "cross")),
        "c": _m("green", "cross"), "x": _m("blue", "square", scene=("teal", "plain"))}  # x: a distractor


def _resp(*ids):
    return "<tool_response>\n%d images (best first): %s.\n</tool_response>" % (
        len(ids), ", ".join(f"{i} (0.50)" for i in ids))


def test_reader_follows_returned_images_and_requeries_for_the_missing_hop():
    mod = _reader()
    eng = mod.ReaderEngine(SimpleNamespace(convert_tokens_to_ids=lambda t: 0), META, k=3)
    sample = SimpleNamespace(meta={"vhop_start": META["a"], "max_calls": 3})
    first = eng.decide(sample, "user: find the end")
    assert '"name": "visual_retrieve"' in first and "red circle" in first
    # a and the distractor x come back: x has the right object in another scene, so the reader asks for b
    second = eng.decide(sample, "..." + first + _resp("a", "x"))
    assert "blue square in the plain navy scene" in second
    # the whole chain in one response (a router call): the answer is the end's main object
    assert eng.decide(sample, "..." + first + _resp("a", "b", "c")) == "green cross"
    # the same search again would show nothing new: give up
    assert eng.decide(sample, first + _resp("a", "x") + second + _resp("x")) == "unknown"
    # out of calls
    sample.meta["max_calls"] = 1
    assert eng.decide(sample, first + _resp("a", "x")) == "unknown"
