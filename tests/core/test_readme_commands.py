"""Every command of the README is run by a test or marked as not runnable here.

Each fenced ``bash`` block of README.md opens with a marker line:

- ``# ci``: run here, in order, in one scratch folder (the repository's configs, views, tools and eval folders
  linked in): ``cat > FILE <<'EOF'`` writes the file, an ``mmrl ...`` line runs through ``mmrl.cli.main`` shrunk
  to tiny worlds and 2-step runs (``SHRINK``); ``...`` stands for the previous full ``mmrl train`` line's arguments.
- ``# run by: PATH[, PATH]``: each command's first two words appear in one of those files (the test or CI script
  that runs it).
- ``# gpu-only``: needs a GPU, a real checkpoint or a benchmark's data; not run.
"""
import json
import re
import shlex

import pytest

from support import REPO
from mmrl.cli import main

SHRINK = {
    "synth": ["--n-train", "24", "--n-test", "8"],
    "sft": ["sft.steps=2", "sft.batch_size=4", "train.micro_batch=8", "train.num_threads=0"],
    "train": ["train.steps=2", "train.prompts_per_step=2", "rollout.n=4", "train.micro_batch=8", "train.save_every=1",
              "train.num_threads=0"],
}
MARKERS = ("# ci", "# gpu-only", "# run by:")


def bash_blocks():
    """``(marker line, [command lines])`` of every fenced bash block (continuation lines joined)."""
    text = (REPO / "README.md").read_text()
    blocks = []
    for body in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        lines = body.replace("\\\n", " ").splitlines()
        blocks.append((lines[0].strip(), lines[1:]))
    return blocks


def test_every_block_is_marked():
    blocks = bash_blocks()
    assert len(blocks) >= 8
    unmarked = [lines[:2] for marker, lines in blocks if not marker.startswith(MARKERS)]
    assert not unmarked, f"README bash blocks without a marker line ({', '.join(MARKERS)}): {unmarked}"


def test_run_by_blocks_name_files_that_run_them():
    for marker, lines in bash_blocks():
        if not marker.startswith("# run by:"):
            continue
        paths = [p.strip() for p in marker.split(":", 1)[1].split(",")]
        texts = [(REPO / p).read_text() for p in paths]  # a missing file fails here
        for line in lines:
            cmd = " ".join(re.sub(r"\s+#.*$", "", line).split()[:2])
            target = cmd.split()[1] if cmd.startswith("make ") else None  # a Makefile target counts as its command
            assert cmd and any(cmd in t or (target and re.search(rf"^{target}:", t, re.M)) for t in texts), (cmd, paths)


def _ci_steps():
    """The ``# ci`` blocks as ("file", name, text) and ("mmrl", line) steps, in README order."""
    steps = []
    for marker, lines in bash_blocks():
        if marker != "# ci":
            continue
        it = iter(lines)
        for line in it:
            m = re.match(r"cat > (\S+) <<'EOF'$", line.strip())
            if m:
                body = []
                for x in it:
                    if x.strip() == "EOF":
                        break
                    body.append(x)
                steps.append(("file", m.group(1), "\n".join(body) + "\n"))
                continue
            cmd = re.sub(r"\s+#.*$", "", line).strip()
            cmd = re.sub(r"^(\w+=\S+\s+)+", "", cmd)  # environment assignments (PYTHONPATH=.) hold here
            if cmd:
                assert cmd.startswith("mmrl "), f"a # ci block runs mmrl commands and heredocs only: {line}"
                steps.append(("mmrl", cmd))
    return steps


def _expand(line, last_train):
    args = shlex.split(re.sub(r"\[([^\]]*)\]", r"\1", line))[1:]
    if "..." in args:
        at = args.index("...")
        args = args[:at] + last_train[1:] + args[at + 1:]
    kind = args[0] if args[0] in ("sft", "train") else "synth" if args[:2] == ["data", "synth"] else None
    return args + SHRINK.get(kind, []), kind


def _metrics(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # a dozen 2-step runs of the tiny model
def test_ci_blocks_run_in_order(tmp_path, monkeypatch, tiny_model_path, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # PYTHONPATH=. : the user's reward and tool modules
    for name in ("configs", "views", "tools", "eval"):  # the README runs from the repository root
        (tmp_path / name).symlink_to(REPO / name)
    steps = _ci_steps()
    assert sum(s[0] == "mmrl" for s in steps) >= 10, steps
    last_train, ran = None, []
    for step in steps:
        if step[0] == "file":
            (tmp_path / step[1]).write_text(step[2])
            continue
        line = step[1]
        args, kind = _expand(line, last_train)
        if "--resume" in args:
            args += ["train.steps=3"]  # one step more than the run it continues
        assert main(args) == 0, (line, args, capsys.readouterr().err[-2000:])
        if kind == "train" and "..." not in line and last_train is None:
            last_train = shlex.split(line)[1:]  # the first full `mmrl train` line: what `...` stands for
        if "--resume" in args:  # continued the RL run from its last checkpoint
            assert "from step 2" in capsys.readouterr().out
            assert [r["step"] for r in _metrics(tmp_path / "runs" / "rl")] == [1, 2, 3]
        if "--overwrite" in args:  # replaced it
            assert [r["step"] for r in _metrics(tmp_path / "runs" / "rl")] == [1, 2]
        ran.append(line)
    assert any("--resume" in x for x in ran) and any("--overwrite" in x for x in ran)
    assert (tmp_path / "sheet.png").exists()
    for run in ("bpo", "tool", "short"):  # the view set, the tool and the reward were used
        assert (tmp_path / "runs" / run / "final").exists(), run
    assert "view_acc/hidden" in json.dumps(_metrics(tmp_path / "runs" / "bpo")) or \
        "view_acc/no_support" in json.dumps(_metrics(tmp_path / "runs" / "bpo"))
    assert any("reward/my_rewards:short" in r for r in _metrics(tmp_path / "runs" / "short"))
    train = json.loads((tmp_path / "data" / "world" / "train.json").read_text())
    assert len({tuple(it["candidates"]) for it in train if it["qtype"] == train[0]["qtype"]}) == 1  # fixed options


def test_the_readme_is_a_guide_that_says_how_to_reach_mmrl():
    """issue 42: at most 300 lines (results live on their pages), and it says to activate .venv (a bare `mmrl` after
    `make setup` was `command not found`)."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "source .venv/bin/activate" in text
