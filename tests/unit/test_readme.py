"""What README.md and docs/ show still works: every `forkbuild ...` command they name
parses with forkbuild's own parser, the README's everyday commands run on a fixture
series, every `nox -s NAME` is a session of noxfile.py, every bench command's options
exist, and every link and repository path resolves."""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from forkbuild.cli import build_parser
from wheelkit import wheel_series

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
GUIDES = [page for page in PAGES if "examples" not in page.parts]  # examples are records of runs

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")
# Placeholders the pages use for a value: what stands in for them when the line is parsed.
PLACEHOLDERS = {"N": "2", "S": "pairwise", "ENV:TYPE:DEFAULT": "DSV41_X:switch:0", "COMMAND": "status",
                "CMD": "true", "ARGS": "x", "…": "", "...": ""}
# Commands run for real on the fixture series (offline, seconds); the rest are parsed only.
RUN_ON_FIXTURE = {"fetch", "apply", "check", "export", "status", "matrix", "build-wheel"}
# Options that need a state or names the fixture does not have (a stopped apply, the real features).
NOT_ON_FIXTURE = {"--continue", "--skip", "--abort", "--keep", "--drop", "--features", "--with", "--without"}
REPO_DIRS = ("tools/", "tests/", "bench/", "docs/", "docker/", "patches/", "mutation/", "constraints/", ".ci/")


def _code(text: str) -> tuple[list[str], list[str]]:
    """(lines of fenced blocks, inline code spans outside them)."""
    blocks = [line for block in FENCE.findall(text) for line in block.replace("\\\n", " ").splitlines()]
    spans = [" ".join(span.split()) for span in SPAN.findall(FENCE.sub("", text))]
    return blocks, spans


def _first_command(line: str) -> str:
    """The line up to a shell operator (a `|` inside a usage's `[...]` is not one)."""
    depth = 0
    for at, char in enumerate(line):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0 and re.match(r" (&&|\|\||;|\||>|2>) ", line[at:]):
            return line[:at]
    return line


def _commands(text: str, program: str) -> list[str]:
    """Every command line for `program` the text shows, comments cut, in order."""
    blocks, spans = _code(text)
    found = []
    for text_line in [*blocks, *spans]:
        for line in text_line.replace("\\|", "|").split(" # ")[0].split(" && "):
            line = re.sub(r"^(\.venv/bin/|\$ )", "", _first_command(line.strip()))
            if line.startswith(program + " "):
                found.append(line)
    return found


def _variants(line: str) -> list[list[str]]:
    """The argv lines a documented usage stands for: the line with no optional `[...]`
    group, then with each group (each `a|b` alternative) on its own."""
    groups = re.findall(r"\[([^\[\]]*)\]", line)
    base = re.sub(r"\s*\[[^\[\]]*\]", "", line)
    lines = [base] + [f"{base} {choice.strip()}" for group in groups for choice in re.split(r"\s+\|\s+", group)]
    argvs = []
    for one in lines:
        tokens = [PLACEHOLDERS.get(token, token) for token in shlex.split(one)[1:]]
        choices = [token.split("|") if "|" in token else [token] for token in tokens if token]
        argvs += [list(argv) for argv in itertools.product(*choices)]
    return argvs


def _documented(pages=GUIDES) -> list[tuple[str, list[str]]]:
    return [(f"{page.relative_to(ROOT)}: {line}", argv)
            for page in pages for line in _commands(page.read_text(), "forkbuild") for argv in _variants(line)]


def test_the_pages_show_forkbuild_commands():
    named = {argv[0] for _, argv in _documented()}
    assert {"apply", "check", "export", "build-wheel", "test-patch", "rebase"} <= named, named


@pytest.mark.parametrize(("where", "argv"), _documented(), ids=lambda value: value if isinstance(value, str) else "")
def test_every_documented_command_parses(where, argv, capsys):
    if len(argv) == 1:  # `forkbuild bisect`: the command's name
        argv = [*argv, "--help"]
    try:
        build_parser(argv).parse_args(argv)
    except SystemExit as stop:
        assert stop.code == 0, f"{where}: forkbuild {shlex.join(argv)}: {capsys.readouterr().err.strip()}"


def _readme_runs() -> list[list[str]]:
    runs = []
    for _, argv in _documented([README]):
        if argv[0] in RUN_ON_FIXTURE and not NOT_ON_FIXTURE & set(argv) and argv not in runs:
            runs.append(argv)
    return runs


def test_the_readme_everyday_commands_run_on_a_fixture_series(tmp_path):
    runs = _readme_runs()
    assert {argv[0] for argv in runs} == RUN_ON_FIXTURE, runs
    series_dir, cache, _ = wheel_series(tmp_path)  # a wheel that builds; the README's default variant is tp4
    series_toml = series_dir / "series.toml"
    series_toml.write_text(series_toml.read_text().replace('"full"', '"tp4"').replace("variants.full", "variants.tp4"))
    for argv in runs:
        argv = [str(tmp_path / "w") if token == "W" else token for token in argv]
        done = subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(series_dir), "--cache", str(cache), *argv],
                              capture_output=True, text=True, cwd=series_dir, env={**os.environ, "COLUMNS": "100"})
        assert done.returncode == 0, f"forkbuild {shlex.join(argv)}: {done.returncode}\n{done.stdout}\n{done.stderr}"


def _nox_sessions() -> set[str]:
    done = subprocess.run([sys.executable, "-m", "nox", "--list"], cwd=ROOT, capture_output=True, text=True, check=True)
    names = set(re.findall(r"^[*-] (\S+) ->", done.stdout, re.MULTILINE))
    return names | {name.split("(")[0] for name in names}


def test_every_nox_session_the_pages_name_exists():
    sessions = _nox_sessions()
    named = {shlex.split(line)[2] for page in PAGES for line in _commands(page.read_text(), "nox -s")}
    assert {"test-patch(tp4)", "build-wheel(tp4)", "rebase"} <= named, named
    assert named - sessions == set(), f"not in noxfile.py: {sorted(named - sessions)}"


def test_every_bench_command_names_a_script_and_its_options():
    commands = [line for page in PAGES for line in _commands(page.read_text(), "python")
                if line.split()[1].startswith("bench/")]
    assert len(commands) >= 5, commands
    for line in commands:
        script, *args = shlex.split(line)[1:]
        assert (ROOT / script).is_file(), line
        done = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, f"{line}: {done.stderr}"
        for option in [arg for arg in args if arg.startswith("-")]:
            assert re.search(rf"(^|[\s,\[]){re.escape(option)}\b", done.stdout), f"{line}: {script} has no {option}"


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {_slug(heading) for heading in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}


def test_every_link_resolves():
    checked = 0
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), f"{page.relative_to(ROOT)}: link to {target}: no {file}"
            assert not anchor or anchor in _anchors(file), f"{page.relative_to(ROOT)}: no heading for #{anchor}"
            checked += 1
    assert checked >= 10


def test_every_repository_path_the_pages_name_exists():
    missing = []
    for page in PAGES:
        for span in _code(page.read_text())[1]:
            if span.startswith(REPO_DIRS) and " " not in span and not re.search(r"[<*{…]|\.\.\.", span):
                if not (ROOT / span.rstrip("/")).exists():
                    missing.append(f"{page.relative_to(ROOT)}: {span}")
    assert missing == []


def test_the_readme_test_command_is_what_ci_runs():
    awk = re.search(r"awk '([^']+)' README.md", (ROOT / ".ci" / "run").read_text())[1]
    line = subprocess.run(["awk", awk, "README.md"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "nox" in line and line.strip() in README.read_text()
