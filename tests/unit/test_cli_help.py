"""The CLI's everyday surface: global options on either side of the command,
every command's --help with a description and examples, the exit codes in
--help and the README, env-value errors located at the value's line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from forkbuild import errors
from forkbuild.cli import build_parser, command_name, exit_codes, main
from forkbuild.errors import ConfigError
from forkbuild.series.config import parse_series
from test_cli import MODULES

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.parametrize("argv", [
    ["-C", "/x", "--cache", "/c", "-v", "status"],
    ["status", "-C", "/x", "--cache", "/c", "-v"],
    ["-v", "status", "-C", "/x", "--cache", "/c"],
])
def test_global_options_work_before_and_after_the_command(argv):
    args = build_parser(argv).parse_args(argv)
    assert (args.series_dir, args.cache, args.verbose) == (Path("/x"), Path("/c"), True)


def test_global_options_before_the_command_survive_its_parser():
    argv = ["-C", "/x", "status"]
    args = build_parser(argv).parse_args(argv)
    assert (args.series_dir, args.cache, args.verbose) == (Path("/x"), None, False)


def test_a_global_option_after_the_command_reaches_the_command(series_fx, capsys):
    # Through main(): the series is found by -C after the command.
    assert main(["status", "--json", "-C", str(series_fx.root), "--cache", str(series_fx.cache)]) == 0
    assert '"name": "fixture"' in capsys.readouterr().out


@pytest.mark.parametrize("module_name", MODULES)
def test_every_command_help_has_a_description_and_an_example(module_name, capsys):
    name = command_name(module_name)
    with pytest.raises(SystemExit):
        build_parser([name, "--help"]).parse_args([name, "--help"])
    text = capsys.readouterr().out
    usage_end = text.index("\n\n") + 2
    description = text[usage_end:text.index("\n\n", usage_end)]
    assert len(description.split()) >= 8, f"{name} --help has no description: {description!r}"
    examples = text.split("examples:\n", 1)[1].splitlines() if "examples:\n" in text else []
    assert any(f"forkbuild {name}" in line or "nox -s" in line for line in examples), f"{name}: no example"


def test_every_error_class_is_in_the_exit_codes():
    def subclasses(cls):
        return [cls] + [sub for child in cls.__subclasses__() for sub in subclasses(child)]

    listed = {(code, name) for code, name, _ in exit_codes()}
    for cls in subclasses(errors.ForkbuildError)[1:]:
        assert (cls.return_code, cls.__name__) in listed


def test_help_prints_the_exit_codes():
    done = subprocess.run([sys.executable, "-m", "forkbuild", "--help"], capture_output=True, text=True, check=True)
    listed = done.stdout.split("exit codes:\n", 1)[1]
    for code, name, _ in exit_codes():
        assert re.search(rf"^\s*{code}\s+{re.escape(name)}:", listed, re.MULTILINE), (code, name)


def test_the_readme_table_is_the_exit_codes():
    text = README.read_text().split("<!-- exit-codes -->\n", 1)[1]
    rows = [line for line in text.splitlines()[2:] if line.startswith("|")]
    expected = [f"| {code} | `{name}` | {meaning} |" for code, name, meaning in exit_codes()]
    assert rows[:len(expected)] == expected
    assert len([row for row in text.split("\n\n", 1)[0].splitlines() if row.startswith("| ")]) == len(expected) + 1


def test_a_broken_pipe_exits_quietly(series_fx):
    # Our end of stdout is closed before forkbuild writes: its print meets EPIPE.
    child = subprocess.Popen([sys.executable, "-m", "forkbuild", "-C", str(series_fx.root), "status", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()
    stderr = child.stderr.read().decode()
    assert child.wait() == 141, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr


def test_an_env_value_error_names_the_line_of_the_value(series_fx):
    text = series_fx.series_toml.read_text().replace('env = { DSV41_ALPHA = "1" }', 'env = { DSV41_ALPHA = "2" }')
    value_line = next(number for number, line in enumerate(text.splitlines(), start=1) if 'DSV41_ALPHA = "2"' in line)
    with pytest.raises(ConfigError) as raised:
        parse_series(text, path=series_fx.series_toml)
    assert f"variants.full.env.DSV41_ALPHA (line {value_line}):" in raised.value.message
