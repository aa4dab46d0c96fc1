"""`mmrl --help` and the light subcommands do not import torch: the heavy subcommands' parsers are built only when
chosen (mmrl/cli.py LAZY_HELP), and each is listed by a help line equal to its full parser's own."""
import subprocess
import sys

import pytest

from support import REPO
from mmrl.cli import LAZY_HELP, build_parser, chosen_command


def _help_lines(parser):
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {c.dest: c.help for c in sub._choices_actions}


def test_lazy_help_lines_equal_the_full_parsers():
    full, light = _help_lines(build_parser(None)), _help_lines(build_parser(""))
    assert full == light
    assert set(LAZY_HELP) <= set(full) and all(full[k] == v for k, v in LAZY_HELP.items())


@pytest.mark.parametrize("argv", [["--help"], ["data", "synth", "--help"], ["eval", "--help"]])  # eval: issue 42
def test_light_commands_do_not_import_torch(argv):
    code = ("import sys\nfrom mmrl.cli import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)" % (argv,))
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout[-2000:]


def test_a_chosen_heavy_command_is_built_in_full():
    assert chosen_command(["--debug", "diagnose", "--out", "x"]) == "diagnose"
    args = build_parser("diagnose").parse_args(["diagnose", "--checkpoint", "ck", "--out", "o"])
    assert args.checkpoint == ["ck"] and args.out == "o"
    with pytest.raises(SystemExit):  # a heavy command not chosen is a help line, not a parser of its arguments
        build_parser("train").parse_args(["diagnose", "--checkpoint", "ck", "--out", "o"])
