"""One process runner: every program forkbuild starts goes through forkbuild.io.process (git
through the git gateway on top of it), so each child gets the same clean environment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import forkbuild
from forkbuild.errors import ToolMissing
from forkbuild.io import process

PACKAGE = Path(forkbuild.__file__).parent
# process.py is the runner; childgroup.py starts its keeper; mutate/overlay/ runs inside the
# test venv (the mutate worker), not in forkbuild's process.
RUNNER = {"process.py", "childgroup.py"}
STARTS = re.compile(r"\bsubprocess\.(run|Popen|call|check_call|check_output|getoutput)\b|\bos\.(system|popen|exec\w*|spawn\w*|posix_spawn\w*)\(")


def test_no_module_but_the_runner_starts_a_program() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py"))
             if path.name not in RUNNER and "overlay" not in path.relative_to(PACKAGE).parts
             for number, line in enumerate(path.read_text().splitlines(), start=1) if STARTS.search(line)]
    assert found == []


def test_a_program_missing_by_name_or_by_path_is_tool_missing_with_a_hint_that_fits(tmp_path: Path) -> None:
    with pytest.raises(ToolMissing, match="forkbuild-no-such-tool is not installed") as by_name:
        process.run(["forkbuild-no-such-tool"])
    assert "apt-get install forkbuild-no-such-tool" in (by_name.value.hint or "")
    # A path (test-patch --python, FORKBUILD_PYTHON) is not a package to install.
    with pytest.raises(ToolMissing, match=f"{tmp_path}/python does not exist") as by_path:
        process.run([str(tmp_path / "python"), "-V"])
    assert "apt-get" not in (by_path.value.hint or "")


def test_fan_out_runs_the_first_once_and_gives_every_consumer_all_of_it(tmp_path: Path) -> None:
    """`docker save` once into every node's `docker load`: each consumer gets every byte; one that
    stops reading early is left behind with its own status, the others go on."""
    runs = tmp_path / "runs"
    first = ["sh", "-c", f'echo run >> {runs}; head -c 5000000 /dev/zero | tr "\\0" x; echo said >&2']
    sinks = [(["sh", "-c", f"cat > {tmp_path}/{name}; echo {name} loaded"], {}) for name in ("a", "b")]
    done = process.fan_out(first, [sinks[0], (["sh", "-c", "head -c 10 >/dev/null; echo gone >&2; exit 3"], {}),
                                   sinks[1]])
    assert runs.read_text() == "run\n"
    assert [(item.status, item.stdout) for item in done] == [(0, "a loaded"), (3, ""), (0, "b loaded")]
    assert done[1].stderr == "said\ngone" and done[0].stderr == "said"
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes() == b"x" * 5_000_000
    failed = process.fan_out(["sh", "-c", "echo half; exit 4"], sinks)
    assert [item.status for item in failed] == [4, 4] and (tmp_path / "a").read_text() == "half\n"
