"""One process runner: every program forkbuild starts goes through forkbuild.io.process (git
through the git gateway on top of it), so each child gets the same clean environment."""

from __future__ import annotations

import re
from pathlib import Path

import forkbuild

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
