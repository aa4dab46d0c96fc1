"""Benchmark definitions as data: the three shipped YAMLs, the official OVO prompts, and key validation."""
import json
from pathlib import Path

import pytest
import yaml

from mmrl.errors import ConfigError
from mmrl.eval.benchmark_def import EVAL_DIR, load_benchmark
from mmrl.eval.protocol import load_protocol

BOUND = {"action_sequence", "action_prediction", "object_interaction", "action_localization", "episodic_reasoning"}


def test_mvbench_definition():
    b = load_benchmark("mvbench")
    assert b.hooks == "mvbench" and b.parser == "mvbench_check_ans" and b.aggregate == "micro"
    assert len(b.tasks) == 20
    assert {t.name for t in b.tasks if t.bound} == BOUND
    assert [t.name for t in b.tasks if t.reader == "frame"] == ["episodic_reasoning"]
    er = b.task("episodic_reasoning")
    assert (er.prefix, er.frame_fps, er.json) == ("tvqa/frames_fps3_hq", 3.0, "episodic_reasoning.json")
    assert b.task("action_localization").prefix == "sta/sta_video"
    assert b.sampling.num_segments == 16 and b.generation.max_new_tokens == 100
    assert b.prompt.prefill == "Best option:(" and b.response.prefix == "(" and b.response.first_line_only
    assert b.prompt.system.startswith("Carefully watch the video") and b.prompt.system.endswith("question.\n")
    assert all(t.json == f"{t.name}.json" for t in b.tasks)


def test_mvbench_lmms_definition():
    b = load_benchmark("mvbench_lmms")
    assert [t.name for t in b.tasks] == [t.name for t in load_benchmark("mvbench").tasks]
    assert b.parser == "lmms_mcq_acc" and b.aggregate == "lmms_answered"
    assert b.generation.max_new_tokens == 16 and b.sampling.rule == "lmms_qwen2_5_vl"
    assert b.prompt.prefill == "" and b.data.layout == "auto"
    assert {t.name for t in b.tasks if t.bound} == BOUND and all(t.source_prefix for t in b.tasks if t.bound)


def test_ovobench_prompts_equal_official(ovo_dir):
    official = json.loads((ovo_dir / "prompts.json").read_text(encoding="utf-8"))
    b = load_benchmark("ovobench")
    for key in ("BR_PROMPT_TEMPLATE", "REC_PROMPT_TEMPLATE", "SSR_PROMPT_TEMPLATE", "CRR_PROMPT_TEMPLATE"):
        assert b.prompt.templates[key] == official[key], key
    assert b.task_names("backward") == official["BACKWARD_TASKS"]
    assert b.task_names("realtime") == official["REAL_TIME_TASKS"]
    assert b.task_names("forward") == official["FORWARD_TASKS"]
    assert set(b.prompt.templates) == {k for k in official if k.endswith("_TEMPLATE")}


def test_ovobench_definition():
    b = load_benchmark("ovobench")
    assert b.chunking.end == "ceil" and not b.chunking.chunked and b.parser is None
    assert {t.name: t.parser for t in b.tasks if t.mode == "forward"} == {
        "REC": "ovo_rec", "SSR": "ovo_yes_no", "CRR": "ovo_yes_no"}
    assert {t.name: t.weight_unit for t in b.tasks if t.mode == "forward"} == {
        "REC": "items", "SSR": "probes", "CRR": "items"}
    assert all(b.parser_for(t) == "ovo_mcq" for t in b.task_names("backward") + b.task_names("realtime"))


def _write(tmp_path: Path, raw: dict, name: str = "bench.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    return p


def _raw(name="mvbench"):
    return yaml.safe_load((EVAL_DIR / f"{name}.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("mutate,key", [
    (lambda r: r.update(parsre="x"), "'parsre'"),
    (lambda r: r["prompt"].update(sytem="x"), "'prompt.sytem'"),
    (lambda r: r["tasks"][2].update(redaer="video"), "'tasks[2].redaer'"),
    (lambda r: r["sampling"].update(num_segments="16"), "'sampling.num_segments'"),
    (lambda r: r["tasks"][0].update(reader="tape"), "'tasks[0].reader'"),
    (lambda r: r["tasks"][1].update(bound="yes"), "'tasks[1].bound'"),
    (lambda r: r.update(parser="no_such_parser"), "'parser'"),
    (lambda r: r.update(aggregate="median"), "'aggregate'"),
    (lambda r: r.pop("tasks"), "'tasks'"),
    (lambda r: r["tasks"][3].pop("name"), "'tasks[3].name'"),
    (lambda r: r.update(prompt="oops"), "'prompt'"),
    (lambda r: r["tasks"][18].pop("frame_fps"), "'tasks[18].frame_fps'"),
    (lambda r: r["tasks"][0].update(frame_fps=3), "'tasks[0].frame_fps'"),
    (lambda r: r["prompt"].update(system_placement="none"), "'prompt.system'"),
    (lambda r: r["generation"].update(temperature=0.2), "'generation.temperature'"),
    (lambda r: r.update(hooks=None), "'hooks'"),
])
def test_validation_names_file_and_key(tmp_path, mutate, key):
    raw = _raw()
    mutate(raw)
    path = _write(tmp_path, raw)
    with pytest.raises(ConfigError) as err:
        load_protocol(path)  # the YAML checks, then the hooks' (aggregate, unused keys)
    assert str(path) in str(err.value) and key in str(err.value)


def test_ovo_template_must_exist(tmp_path):
    raw = _raw("ovobench")
    raw["tasks"][0]["template"] = "NOPE"
    path = _write(tmp_path, raw)
    with pytest.raises(ConfigError, match=r"tasks\[0\]\.template"):
        load_benchmark(path)


def test_unknown_benchmark_lists_known():
    with pytest.raises(ConfigError, match="known: .*mvbench.*ovobench"):
        load_benchmark("no_such_bench")


def test_new_benchmark_reuses_hooks(tmp_path):
    """A new MVBench-format benchmark is a YAML naming existing hooks: no Python."""
    raw = {"name": "tiny", "hooks": "mvbench", "protocol": "my protocol", "parser": "strict_letter",
           "aggregate": "micro", "tasks": [{"name": "a", "json": "a.json", "prefix": "va"},
                                           {"name": "b", "json": "b.json", "reader": "frame", "bound": True,
                                            "frame_fps": 2}],
           "prompt": {"user_template": "{question}\n{options}", "post_prompt": "\nAnswer with the letter."},
           "sampling": {"num_segments": 8}, "pixels": {"max_pixels": 3136}}
    _write(tmp_path, raw, "tiny.yaml")
    b = load_benchmark("tiny", search_dirs=[tmp_path])
    assert b.name == "tiny" and b.task_names() == ["a", "b"] and b.sampling.num_segments == 8
    assert b.path == str(tmp_path / "tiny.yaml")
    assert load_benchmark(tmp_path / "tiny.yaml").tasks[1].reader == "frame"
    assert "sampling.num_segments" in b.given and "tasks[1].frame_fps" in b.given


def test_overrides_are_validated_like_yaml_keys():
    b = load_benchmark("mvbench", overrides={"sampling.num_segments": 8, "pixels.max_pixels": 3136})
    assert (b.sampling.num_segments, b.pixels.max_pixels) == (8, 3136)
    with pytest.raises(ConfigError, match="'sampling.num_segmnts'"):
        load_benchmark("mvbench", overrides={"sampling.num_segmnts": 8})
    with pytest.raises(ConfigError, match="'sampling.num_segments' has the wrong type"):
        load_benchmark("mvbench", overrides={"sampling.num_segments": "many"})
