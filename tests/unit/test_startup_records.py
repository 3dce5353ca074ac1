"""What a re-run takes from the cache, checked through a real `forkbuild` process: which git
commands it ran (GIT_TRACE), what it printed and returned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fixtures import SeriesFixture
from forkbuild.io.git import Git

PROBE = """
import sys
from forkbuild.cli import main
code = main(sys.argv[1:])
print("imported:", " ".join(name for name in ("email.parser", "unidiff", "tomllib") if name in sys.modules))
sys.exit(code)
"""


def forkbuild(fx: SeriesFixture, *args: str, trace: Path | None = None, probe: bool = False,
              extra: str = "") -> subprocess.CompletedProcess[str]:
    """`forkbuild -C <series> --cache <cache> args` in a new Python process."""
    env = {**os.environ, **({"GIT_TRACE": str(trace)} if trace else {})}
    env.pop("PYTHONUNBUFFERED", None)  # output to a pipe stays in Python's buffers until something flushes it
    code = PROBE if probe else extra + "from forkbuild.cli import run\nrun()\n"
    return subprocess.run([sys.executable, "-c", code, "-C", str(fx.root), "--cache", str(fx.cache), *args],
                          capture_output=True, text=True, env=env, check=False)


def apply_all(fx: SeriesFixture, dest: Path, **options) -> subprocess.CompletedProcess[str]:
    done = forkbuild(fx, "apply", "--all", "--dir", str(dest), **options)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def traced_commands(trace: Path) -> list[str]:
    return [line.split("trace: built-in: ", 1)[1] for line in trace.read_text().splitlines() if "trace: built-in: " in line]


def test_a_rerun_lists_the_upstream_tree_once_and_never_reads_a_listing_from_the_cache(
        series_fx: SeriesFixture, tmp_path: Path) -> None:
    """Issue 38: the engine's fast rung took upstream's file listing (blob ids) from a record in
    the cache; a tampered one put other blobs under the patches. git answers, once a run, for the
    paths the patches name (the symbolic-link check and the fast rung read the same answer)."""
    apply_all(series_fx, tmp_path / "tree")
    head = Git(tmp_path / "tree").head()
    base = Git(tmp_path / "tree").out("rev-list", "--max-parents=0", "HEAD")
    listing = {path: Git(tmp_path / "tree").out("rev-parse", f"{base}:{path}")
               for path in ("python/pkg/core.py", "python/pkg/util.py")}
    kept = series_fx.cache / "upstream.git" / "forkbuild-trees" / base  # where a listing was once kept
    kept.parent.mkdir(exist_ok=True)
    swapped = {"python/pkg/core.py": listing["python/pkg/util.py"], "python/pkg/util.py": listing["python/pkg/core.py"]}
    kept.write_text(json.dumps({"paths": list(swapped), "modes": [0o100644] * 2, "blobs": "".join(swapped.values())}))
    trace = tmp_path / "trace"
    apply_all(series_fx, tmp_path / "tree", trace=trace)
    listed = [command for command in traced_commands(trace) if command.startswith("git ls-tree")]
    assert len(listed) == 1 and listed[0].startswith("git ls-tree -t") and "python/pkg/core.py" in listed[0]
    assert Git(tmp_path / "tree").head() == head
