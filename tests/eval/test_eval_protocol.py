"""The resolved protocols, pinned to the official values; --show-protocol; flags override only when given;
every field that would change nothing is refused with its key named."""
import pytest

from mmrl.cli import main
from mmrl.errors import ConfigError
from mmrl.eval.protocol import describe, load_protocol

MVBENCH_SYSTEM = ('"Carefully watch the video and pay attention to the cause and sequence of events, the detail and '
                  'movement of objects, and the action and pose of persons. Based on your observations, select the best '
                  'option that accurately addresses the question.\\n"')

# value -> where it comes from (official code read at the commits in specs/benchmarks.md and docs/benchmarks.md)
MVBENCH = {
    "sampling.rule": '"get_index"',                  # mvbench.ipynb MVBench_dataset.get_index
    "sampling.num_segments": "16",                   # mvbench.ipynb num_frame = 16
    "sampling.use_bound": "true",                    # data_list (..., True) for the 5 bound tasks
    "tasks.frame_fps": "episodic_reasoning=3",       # read_frame(..., fps=3)
    "tasks.reader": "episodic_reasoning=frame",      # data_list "frame"
    "tasks.bound": ("action_sequence=true; action_prediction=true; object_interaction=true; "
                    "action_localization=true; episodic_reasoning=true"),
    "prompt.system": MVBENCH_SYSTEM,                 # evaluation cell: system=
    "prompt.system_placement": '"system_and_user"',  # infer_mvbench(system_llm=True)
    "prompt.user_template": '"Question: {question}\\nOptions:\\n{options}"',   # qa_template
    "prompt.post_prompt": '"\\nOnly give the best option."',                    # question_prompt
    "prompt.prefill": '"Best option:("',             # answer_prompt
    "response.prefix": '"("',                        # return_prompt
    "response.strip": "true", "response.first_line_only": "true",  # llm_message.strip().split('\n')[0]
    "generation.max_new_tokens": "100", "generation.do_sample": "false",  # answer(max_new_tokens=100, do_sample=False)
    "parser": '"mvbench_check_ans"', "aggregate": '"micro"',              # check_ans, acc_dict
    "pixels.max_pixels": "50176",                    # resolution = 224
}
MVBENCH_LMMS = {
    "sampling.rule": '"lmms_qwen2_5_vl"',
    "sampling.fps": "2.0",                           # qwen-vl-utils FPS (no fps in the wrapper's video element)
    "sampling.max_frames": "32",                     # qwen2_5_vl.py max_num_frames = 32
    "pixels.min_pixels": "200704",                   # qwen2_5_vl.py min_pixels = 256 * 28 * 28
    "pixels.max_pixels": "1605632",                  # qwen2_5_vl.py max_pixels (fetch_video caps it at 602,112)
    "prompt.system": '"You are a helpful assistant."',   # qwen2_5_vl.py system_prompt
    "prompt.system_placement": '"system"',
    "prompt.user_template": '"Question:{question}\\nOption:\\n{options}"',  # mvbench_doc_to_text
    "prompt.post_prompt": '"Only give the best option.\\n"',               # per-task post_prompt
    "prompt.prefill": '""',
    "generation.max_new_tokens": "16", "generation.do_sample": "false",   # _default_template_yaml
    "parser": '"lmms_mcq_acc"', "aggregate": '"lmms_answered"',          # mcq_acc, mvbench_aggregate_results
}
OVOBENCH = {
    "sampling.rule": '"ovo_qwen2_vl"',
    "sampling.max_frames": "64", "sampling.frames_margin": "2",  # QWen2VL.py min(64, len(video) - 2)
    "pixels.max_pixels": "151200",                   # QWen2VL.py max_pixels = 360 * 420
    "pixels.min_pixels": "100352",                   # qwen-vl-utils fetch_video default (QWen2VL.py sets none)
    "generation.max_new_tokens": "128",              # QWen2VL.py generate(max_new_tokens=128)
    "parser_mode": '"list"',                         # QWen2VL.py returns batch_decode's list
    "chunking.end": '"ceil"',                        # chunk_videos.py math.ceil(realtime)
    "prompt.system": '""',                           # QWen2VL.py: no system message
    "prompt.option_format": '"{letter}. {option}"', "prompt.option_joiner": '"; "',   # OVOBench.py options
    "tasks.parser": ("EPM=ovo_mcq; ASI=ovo_mcq; HLD=ovo_mcq; OCR=ovo_mcq; ACR=ovo_mcq; ATR=ovo_mcq; STU=ovo_mcq; "
                     "FPD=ovo_mcq; OJR=ovo_mcq; REC=ovo_rec; SSR=ovo_yes_no; CRR=ovo_yes_no"),
}


@pytest.mark.parametrize("name,expected", [("mvbench", MVBENCH), ("mvbench_lmms", MVBENCH_LMMS),
                                           ("ovobench", OVOBENCH)])
def test_resolved_protocol_pins_official_values(name, expected):
    lines = describe(*load_protocol(name))
    assert {k: lines.get(k) for k in expected} == expected


def test_show_protocol_cli(capsys):
    assert main(["eval", "ovobench", "--show-protocol"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert all(": " in line and not line.startswith(" ") for line in out)
    lines = dict(line.split(": ", 1) for line in out)
    # no flag given: the YAML decides (the old CLI forced 4 frames / 112*112 here)
    assert lines["sampling.max_frames"] == "64" and lines["pixels.max_pixels"] == "151200"
    assert lines["sampling.rule.source"].startswith("OVO-Bench models/QWen2VL.py")
    assert "generation.temperature" not in lines  # greedy: the sampling knobs do not apply


def test_flags_override_only_when_given(capsys):
    assert main(["eval", "ovobench", "generation.max_new_tokens=32", "--nframes", "8", "--max-pixels", "200704",
                 "--show-protocol"]) == 0
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert (lines["sampling.max_frames"], lines["pixels.max_pixels"]) == ("8", "200704")
    assert lines["generation.max_new_tokens"] == "32" and lines["pixels.min_pixels"] == "100352"
    assert main(["eval", "mvbench", "--protocol", "lmms-eval", "--show-protocol"]) == 0
    assert "benchmark: mvbench_lmms" in capsys.readouterr().out


@pytest.mark.parametrize("argv,key", [
    (["eval", "mvbench_lmms", "--num-segments", "8"], "'sampling.num_segments' is not read by frame rule"),
    (["eval", "ovobench", "prompt.user_template=x"], "'prompt.user_template' is not used by the 'ovobench' hooks"),
    (["eval", "synthetic", "prompt.system=x"], "'prompt.system' is not used by the 'synthetic' hooks"),
    (["eval", "ovobench", "aggregate=micro"], "'aggregate' is not used"),
    (["eval", "mvbench", "generation.temperature=0.5"], "'generation.temperature' is set but"),
    (["eval", "mvbench", "sampling.num_segmnts=8"], "unknown key 'sampling.num_segmnts'"),
    (["eval", "ovobench", "--min-pixels", "200000"], "'pixels.min_pixels' = 200000 is above"),
    (["eval", "mvbench", "--parser-mode", "list"], "'parser_mode' is not used by the 'mvbench' hooks"),
])
def test_unsupported_fields_are_refused(argv, key, capsys):
    assert main(argv + ["--show-protocol"]) == 2
    assert key in capsys.readouterr().err


def test_unsupported_yaml_field_is_refused(tmp_path):
    path = tmp_path / "bench.yaml"
    path.write_text("name: b\nhooks: ovobench\ntasks: [{name: EPM, mode: backward, parser: ovo_mcq}]\n"
                    "sampling: {rule: ovo_qwen2_vl, max_frames: 8, frames_margin: 2, num_segments: 4}\n")
    with pytest.raises(ConfigError, match=r"bench.yaml: key 'sampling.num_segments' is not read") as err:
        load_protocol(path)
    assert "ovo_qwen2_vl" in str(err.value)


def test_hooks_must_exist(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text("name: b\nhooks: no_such_hooks\n")
    with pytest.raises(ConfigError, match="key 'hooks': unknown benchmark hooks 'no_such_hooks'; known: .*mvbench"):
        load_protocol(path)


@pytest.mark.parametrize("script,env,expect", [
    ("eval_mvbench.sh", {"PROTOCOL": "lmms-eval"}, "sampling.max_frames: 32"),
    ("eval_mvbench.sh", {"NFRAMES": "8"}, "sampling.num_segments: 8"),
    ("eval_ovobench.sh", {"CHUNKED": "1"}, "chunking.chunked: true"),
])
def test_launch_scripts_resolve_their_protocol(script, env, expect):
    """The scripts pass a flag only when its variable is set, so every protocol loads."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    full = dict(os.environ, MMRL=f"{sys.executable} -m mmrl.cli", **env)
    p = subprocess.run(["bash", str(repo / "scripts" / script), "--show-protocol"], cwd=repo, env=full,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert expect in p.stdout.splitlines()


@pytest.mark.parametrize("script,bench,expect", [("eval_mvbench.sh", "mvbench", "sampling.num_segments: 16"),
                                                  ("eval_ovobench.sh", "ovobench", "sampling.max_frames: 64")])
def test_eval_scripts_run_the_venvs_mmrl_and_have_a_dry_run(script, bench, expect, tmp_path):
    """issue 42: the scripts called a bare `mmrl` (not on PATH without an activated venv) and had no DRY_RUN. Now they
    run `$PY -m mmrl` (the repository's .venv by default), and DRY_RUN=1 prints the command and the protocol it
    resolves, loading nothing (the model folder need not exist)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "MMRL"}
    full = dict(env, DRY_RUN="1", PY=sys.executable, MODEL=str(tmp_path / "no-model"))
    p = subprocess.run(["bash", str(repo / "scripts" / script)], cwd=tmp_path, env=full, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert lines[0].startswith(f"# eval: {sys.executable} -m mmrl eval {bench} --model {tmp_path / 'no-model'} ")
    assert expect in lines


def test_generation_fields_reach_the_engine():
    from mmrl.eval.driver import sampling_params

    greedy = sampling_params(load_protocol("mvbench")[0].generation)
    assert greedy.greedy and greedy.max_new_tokens == 100
    bdef, _ = load_protocol("mvbench", {"generation.do_sample": True, "generation.temperature": 0.7,
                                        "generation.top_p": 0.9, "generation.max_new_tokens": 12})
    p = sampling_params(bdef.generation)
    assert (p.greedy, p.temperature, p.top_p, p.max_new_tokens) == (False, 0.7, 0.9, 12)
    assert "generation.temperature" in describe(bdef, load_protocol("mvbench")[1])


@pytest.mark.parametrize("name", ["mvbench", "mvbench_lmms", "ovobench", "synthetic"])
def test_docs_show_the_current_protocol(name):
    """docs/benchmarks.md quotes `mmrl eval <name> --show-protocol` verbatim (definition paths repo-relative)."""
    from pathlib import Path

    from mmrl.eval.protocol import protocol_text

    repo = Path(__file__).resolve().parents[2]
    text = protocol_text(describe(*load_protocol(name))).replace(f"{repo}/", "")
    assert f"```\n{text}```" in (repo / "docs" / "benchmarks.md").read_text(encoding="utf-8")


def test_inputs_a_benchmark_does_not_read_are_refused(capsys, tmp_path):
    assert main(["eval", "mvbench", "--model", "tiny", "--data-root", str(tmp_path), "--viewset", "x.yaml"]) == 2
    assert "--viewset is not used by this benchmark" in capsys.readouterr().err


def test_score_only_writes_a_report_with_out(tmp_path, capsys):
    from pathlib import Path

    results = str(Path(__file__).with_name("data") / "ovo_small_results.json")
    assert main(["eval", "ovobench", "--score-only", results, "--out", str(tmp_path / "r")]) == 0
    assert "**Total (official)**: 49.07" in (tmp_path / "r" / "summary.md").read_text()


def test_each_benchmark_reads_its_input_flags():
    from mmrl.eval.hooks import get_hooks

    assert get_hooks("mvbench").inputs == ("data_root", "video_root")
    assert get_hooks("ovobench").inputs == ("data_root", "anno", "video_root")
    assert get_hooks("synthetic").inputs == ("data", "viewset")
