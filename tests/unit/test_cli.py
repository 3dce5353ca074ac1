"""The CLI imports only the requested command's module; that needs every module
of forkbuild.commands to be named after the command it adds."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import subprocess
import sys

import pytest

from forkbuild import commands
from forkbuild.cli import build_parser, command_name

MODULES = sorted(info.name for info in pkgutil.iter_modules(commands.__path__))


@pytest.mark.parametrize("module_name", MODULES)
def test_each_command_module_adds_the_command_it_is_named_after(module_name):
    subparsers = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(f"forkbuild.commands.{module_name}").add_parser(subparsers)
    assert list(subparsers.choices) == [command_name(module_name)]


def test_a_command_parses_with_only_its_module_and_global_options_first():
    args = build_parser(["-C", "/x", "-v", "status", "--json"]).parse_args(["-C", "/x", "-v", "status", "--json"])
    assert (args.command, args.json, args.verbose) == ("status", True, True)


def test_help_and_unknown_commands_still_list_every_command(capsys):
    with pytest.raises(SystemExit):
        build_parser(["nope"]).parse_args(["nope"])
    listed = capsys.readouterr().err
    assert all(command_name(name) in listed for name in MODULES)


def test_only_the_requested_command_module_is_imported():
    code = ("import sys; from forkbuild.cli import build_parser; build_parser(['status']);"
            "print(sorted(m for m in sys.modules if m.startswith('forkbuild.commands.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['forkbuild.commands.status']"
