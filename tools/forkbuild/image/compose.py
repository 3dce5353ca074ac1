"""The compose file describing every variant's image in both modes, so
`docker-compose build` (here) and `docker buildx bake` (elsewhere) build them
in parallel. Written as YAML whose scalars are JSON strings: valid YAML with
no YAML library, and every value quoted exactly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from forkbuild.image.build import IMAGE_REPO, TARGET, build_args, default_tag
from forkbuild.image.context import ImageContext

# Users point compose at other bases without regenerating the file.
BASE_VARIABLE = {"wheel": "FORKBUILD_BASE_IMAGE", "delta": "FORKBUILD_DELTA_BASE_IMAGE"}


@dataclass(frozen=True, kw_only=True)
class Service:
    name: str
    image: str
    context: str
    args: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


def services(contexts: Sequence[ImageContext], *, modes: Sequence[str], bases: dict[str, str],
             relative_to: Path, repository: str = IMAGE_REPO) -> list[Service]:
    result = []
    for context in contexts:
        for mode in modes:
            args = build_args(context, mode=mode, base=f"${{{BASE_VARIABLE[mode]}:-{bases[mode]}}}")
            result.append(Service(name=f"{context.variant}-{mode}", image=default_tag(context.variant, mode, repository=repository),
                                  context=os.path.relpath(context.path, relative_to), args=args))
    return result


def render(items: Sequence[Service], *, header: str) -> str:
    q = json.dumps
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines.append("services:")
    for service in items:
        lines += [f"  {q(service.name)}:", f"    image: {q(service.image)}", "    build:",
                  f"      context: {q(service.context)}", f"      target: {q(TARGET)}", '      network: "none"',
                  "      args:"]
        lines += [f"        {q(key)}: {q(value)}" for key, value in service.args.items()]
    return "\n".join(lines) + "\n"
