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
