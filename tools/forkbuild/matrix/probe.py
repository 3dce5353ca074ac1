"""How one bisect probe runs the user's command: with FORKBUILD_FEATURES, FORKBUILD_WHEELS and
FORKBUILD_IMAGE set, after a build of the probe's features (build mode) or of the target once,
each probe setting the candidates' DSV41_* guards on or off (runtime mode)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from forkbuild.context import Context
from forkbuild.errors import BisectError, ToolMissing
from forkbuild.image import build
from forkbuild.image.base import ensure_bases
from forkbuild.image.build_context import prepare_context
from forkbuild.image.docker import Docker
from forkbuild.io import process
from forkbuild.series.combination import Combination, from_features
from forkbuild.series.config import Guard, Series, native_platform
from forkbuild.series.guards import parse_switch
from forkbuild.wheel.builder import WheelRequest, build_wheels

FEATURES_ENV = "FORKBUILD_FEATURES"
WHEELS_ENV = "FORKBUILD_WHEELS"  # the wheel paths, os.pathsep-separated (one per Python tag)
IMAGE_ENV = "FORKBUILD_IMAGE"
OUTPUT_TAIL = 600  # characters of the command's output kept in the probe log for a failing try


def running_tag(series: Series) -> tuple[str, ...]:
    """The pinned Python tag of the interpreter running forkbuild (a probe needs one wheel), else every one."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return (tag,) if any(pin.python_tag == tag for pin in series.upstream.wheels) else ()


def run_command(command: Sequence[str], env: Mapping[str, str], *, reporter, label: str) -> tuple[int, str]:
    """One try of the user's command: its exit code, and `label` with it (and the output's tail)."""
    try:
        done = process.run(list(command), env=env)
    except ToolMissing as error:
        raise BisectError(error.message, hint="check the command after `--`") from error
    output = done.stdout + done.stderr
    reporter.detail(output)
    tail = output[-OUTPUT_TAIL:] if done.status else ""
    return done.status, f"{label}; exit {done.status}" + (f"\n{tail}" if tail else "")


def on_values(series: Series, target: Combination, environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Per feature of `target`, the guard values that turn it on: the operator's (`environ`),
    else the target's runtime default, else "1" for its first switch. A feature none of whose
    guards then differ from their defaults cannot be toggled at run time: left out."""
    def is_default(guard: Guard, value: str) -> bool:
        return parse_switch(value) == parse_switch(guard.default) if guard.type == "switch" else value == guard.default

    result = {}
    for name in target.features:
        guards = series.features[name].guards
        values = {guard.env: environ.get(guard.env, target.env.get(guard.env, guard.default)) for guard in guards}
        if all(is_default(guard, values[guard.env]) for guard in guards):
            first_switch = next((guard for guard in guards if guard.type == "switch"), None)
            if first_switch is not None and first_switch.env not in environ:
                values[first_switch.env] = "1"
        if any(not is_default(guard, values[guard.env]) for guard in guards):
            result[name] = values
    return result


@dataclass(kw_only=True)
class Probes:
    """Build mode: each probe builds its features (plus what they require). Runtime mode: one
    build of the target; each probe sets the candidates' guards on or off."""

    context: Context
    target: Combination
    command: tuple[str, ...]
    python_tags: tuple[str, ...]
    out_dir: Path  # of the wheels (each built once per content)
    runtime: bool = False
    image: bool = False
    base: str = ""  # "": the official image, or with local_base the local stock base
    local_base: bool = False
    _built: dict[str, str] | None = field(default=None, init=False)
    _docker: Docker | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.on = on_values(self.context.series, self.target, os.environ) if self.runtime else None
        self.candidates = tuple(self.on) if self.on is not None else self.target.features
        self.fixed = tuple(name for name in self.target.features if name not in self.candidates)

    def __call__(self, features: tuple[str, ...]) -> tuple[int, str]:
        series = self.context.series
        if self.on is None:
            combination = from_features(series, features, base=self.target.base)
            env = {FEATURES_ENV: ",".join(combination.features), **self.build(combination)}
            return run_command(self.command, env, reporter=self.context.reporter,
                               label=f"built {combination.name} ({combination.label})")
        if self._built is None:
            self._built = self.build(self.target)
        guards = {guard.env: values[guard.env] if name in features else guard.default
                  for name, values in self.on.items() for guard in series.features[name].guards}
        env = {**self._built, FEATURES_ENV: ",".join(features), **guards}
        on = " ".join(f"{key}={value}" for name in features for key, value in self.on[name].items())
        return run_command(self.command, env, reporter=self.context.reporter,
                           label=f"{self.target.name} with {on or 'every guard off'}")

    def build(self, combination: Combination) -> dict[str, str]:
        """The probe environment of a build of `combination`: its wheels and image."""
        # The probe runs here: this machine's platform.
        request = WheelRequest(variant=combination, out_dir=self.out_dir, python_tags=self.python_tags,
                               platforms=(native_platform(),))
        with self.context.reporter.step(f"wheel of {combination.name} ({combination.label})"):
            wheels = [built.path for built in build_wheels(context=self.context, request=request)]
        env = {WHEELS_ENV: os.pathsep.join(str(path) for path in wheels)}
        if not self.image:
            return env
        self._docker = self._docker or Docker.connect(reporter=self.context.reporter)
        image_context = prepare_context(self.context, variant=combination, platform=native_platform(), wheels=wheels)
        base = (ensure_bases(context=self.context, docker=self._docker, stock=True, platform=native_platform())[-1]
                if self.local_base
                else self.base or build.official_base(image_context.manifest.upstream.version))
        tag = build.default_tag(combination.name, "wheel", native_platform())
        with self.context.reporter.step(f"image {tag}"):
            build.build_image(docker=self._docker, context=image_context, mode="wheel", base=base, tag=tag)
        return {**env, IMAGE_ENV: tag}
