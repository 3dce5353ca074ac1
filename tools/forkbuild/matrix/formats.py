"""A matrix written out: a table for people, JSON, the object a GitHub Actions
matrix reads, and a docker-bake.json with one target per combination.

bake: `docker buildx bake -f build/docker-bake.json` builds every target of the
default group in parallel on whatever builder buildx points at (a BuildKit
cluster). The file follows the Bake file reference (JSON form: `variable`,
`group`, `target`); tests/unit/data/docker-bake.schema.json transcribes the
parts used here and the tests validate against it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from forkbuild.combination import Combination
from forkbuild.image.build import IMAGE_REPO, TARGET, build_args, default_tag
from forkbuild.image.context import ImageContext
from forkbuild.matrix.strategies import Matrix

FORMATS = ("table", "json", "github", "bake")
BASE_VARIABLE = "FORKBUILD_BASE_IMAGE"  # bake variable: point every target at another base without regenerating


def summary_line(matrix: Matrix) -> str:
    text = f"{matrix.count} combinations ({matrix.strategy}; lower bound {matrix.lower_bound})"
    return f"{text}; {matrix.note}" if matrix.note else text


def table(matrix: Matrix) -> Table:
    grid = Table("#", "name", "n", "features", "runtime defaults", title=f"forkbuild matrix --strategy {matrix.strategy}",
                 caption=summary_line(matrix))
    for number, combination in enumerate(matrix.combinations, start=1):
        grid.add_row(str(number), combination.name, str(len(combination.features)), ", ".join(combination.features) or "-",
                     combination.base or "guard defaults")
    return grid


def as_json(matrix: Matrix) -> list[dict[str, Any]]:
    return [{"name": combination.name, "features": list(combination.features)} for combination in matrix.combinations]


def as_github(matrix: Matrix) -> dict[str, Any]:
    """`strategy.matrix` of a GitHub Actions job: `${{ matrix.features }}` is ready for `--features`."""
    return {"include": [{"name": combination.name, "features": ",".join(combination.features)}
                        for combination in matrix.combinations]}


def as_bake(items: Sequence[tuple[Combination, ImageContext]], *, mode: str, base: str, relative_to: Path,
            repository: str = IMAGE_REPO) -> dict[str, Any]:
    """docker-bake.json: one target per combination (its prepared build context), all in group `default`."""
    targets = {}
    for combination, context in items:
        targets[combination.name] = {
            "context": os.path.relpath(context.path, relative_to),
            "dockerfile": "Dockerfile",
            "target": TARGET,
            "args": build_args(context, mode=mode, base=f"${{{BASE_VARIABLE}}}"),
            "tags": [default_tag(combination.name, mode, repository=repository)],
            "network": "none",
        }
    return {"variable": {BASE_VARIABLE: {"default": base}},
            "group": {"default": {"targets": list(targets)}},
            "target": targets}


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"
