"""The README's "Using it" commands, shrunk (tiny worlds, 2-step runs), run in order through the CLI.

Lines are read from README.md itself, so the README cannot drift from what works. Skipped: the public
benchmarks (``PATH`` placeholders). ``...`` stands for the previous full ``mmrl train`` line's arguments;
``[...]`` options are taken."""
import json
import re
import shlex

import pytest

from support import REPO
from mmrl.cli import main

pytestmark = pytest.mark.slow

SHRINK = {
    "synth": ["--n-train", "24", "--n-test", "8"],
    "sft": ["sft.steps=2", "sft.batch_size=4", "train.micro_batch=8", "train.num_threads=0"],
    "train": ["train.steps=2", "train.prompts_per_step=2", "rollout.n=4", "train.micro_batch=8", "train.save_every=1",
              "train.num_threads=0"],
}


def readme_commands():
    text = (REPO / "README.md").read_text()
    block = text.split("## Using it", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [re.sub(r"\s+#.*$", "", x).strip() for x in block.splitlines()]
    return [x for x in lines if x.startswith("mmrl ") and "PATH" not in x and "--score-only" not in x]


def _expand(line, last_train):
    args = shlex.split(re.sub(r"\[([^\]]*)\]", r"\1", line))[1:]
    if "..." in args:
        at = args.index("...")
        args = args[:at] + last_train[1:] + args[at + 1:]
    kind = args[0] if args[0] in ("sft", "train") else "synth" if args[:2] == ["data", "synth"] else None
    return args + SHRINK.get(kind, []), kind


def _metrics(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_readme_commands_run_in_order(tmp_path, monkeypatch, tiny_model_path, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("configs", "views"):  # the README runs from the repository root
        (tmp_path / name).symlink_to(REPO / name)
    cmds = readme_commands()
    assert len(cmds) >= 10, cmds
    last_train, ran = None, []
    for line in cmds:
        args, kind = _expand(line, last_train)
        if kind == "train" and "--config" in args and "configs/bpo_demo.yaml" in args:
            args += ["train.out_dir=runs/bpo"]  # its own run directory (the line shares the RL line's other flags)
        if "--resume" in args:
            args += ["train.steps=3"]  # one step more than the run it continues
        assert main(args) == 0, (line, args, capsys.readouterr().err[-2000:])
        if kind == "train" and "..." not in line:
            last_train = shlex.split(line)[1:]  # ["train", ...]
        if "--resume" in args:  # continued the RL run from its last checkpoint
            assert "from step 2" in capsys.readouterr().out
            assert [r["step"] for r in _metrics(tmp_path / "runs" / "rl")] == [1, 2, 3]
        if "--overwrite" in args:  # replaced it
            assert [r["step"] for r in _metrics(tmp_path / "runs" / "rl")] == [1, 2]
        ran.append(line)
    assert any("--resume" in x for x in ran) and any("--overwrite" in x for x in ran)
    assert (tmp_path / "sheet.png").exists() and (tmp_path / "runs" / "bpo" / "final").exists()
    train = json.loads((tmp_path / "data" / "world" / "train.json").read_text())
    assert len({tuple(it["candidates"]) for it in train if it["qtype"] == train[0]["qtype"]}) == 1  # fixed options
