"""What every command needs: where the series is, the parsed series, the cache, output."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from forkbuild.console import Reporter
from forkbuild.errors import ConfigError
from forkbuild.series.config import Series, load_series
from forkbuild.series.layout import BUILD_DIR, DIST_DIR, DOCKER_DIR, PATCHES_DIR, SERIES_FILE, WORK_DIR
from forkbuild.series.writer import recover_series
from forkbuild.upstream.cache import UpstreamCache


def directory_argument(text: str) -> Path:
    """-C/--cache: a path; '' (or blanks) is refused, not taken as the current directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names no directory: give a directory, or leave the option "
                                         "out (-C: found upward from here; --cache: $FORKBUILD_CACHE or .cache/forkbuild)")
    return Path(text)


def find_series_dir(start: Path) -> Path:
    for directory in (start, *start.parents):
        if (directory / SERIES_FILE).is_file():
            return directory
    raise ConfigError([f"no {SERIES_FILE} in {start} or any parent directory"], source=str(start))


@dataclass
class Context:
    """What every command works in: the series directory, the upstream cache and the reporter."""

    series_dir: Path
    cache_dir: Path
    reporter: Reporter = field(default_factory=Reporter)

    @classmethod
    def create(cls, *, series_dir: Path | None, cache_dir: Path | None, reporter: Reporter) -> Context:
        root = (series_dir or find_series_dir(Path.cwd())).resolve()
        if not (root / SERIES_FILE).is_file():
            raise ConfigError([f"{root / SERIES_FILE} does not exist"], source=str(root))
        if recover_series(root):  # a write a killed forkbuild left, finished before the series is read
            reporter.warn(f"finished an interrupted write of {root / SERIES_FILE} and patches/ (a killed forkbuild)")
        cache = cache_dir or Path(os.environ.get("FORKBUILD_CACHE") or root / ".cache" / "forkbuild")
        context = cls(series_dir=root, cache_dir=cache.resolve(), reporter=reporter)
        context.outside_series(cache, "--cache" if cache_dir else "$FORKBUILD_CACHE")  # a rebase restores patches/
        return context

    @cached_property
    def series(self) -> Series:
        """series.toml, parsed and validated once."""
        return load_series(self.series_dir / SERIES_FILE)

    @property
    def upstream(self) -> UpstreamCache:
        """The upstream cache under cache_dir."""
        return UpstreamCache(self.cache_dir, reporter=self.reporter)

    @property
    def series_file(self) -> Path:
        return self.series_dir / SERIES_FILE

    @property
    def work_dir(self) -> Path:
        return self.series_dir / WORK_DIR

    @property
    def dist_dir(self) -> Path:
        return self.series_dir / DIST_DIR

    @property
    def docker_dir(self) -> Path:
        return self.series_dir / DOCKER_DIR

    @property
    def build_dir(self) -> Path:
        return self.series_dir / BUILD_DIR

    def outside_series(self, path: Path, option: str) -> Path:
        """A path forkbuild writes to (--dir, --out, --log), resolved: never series.toml, patches/ or in it,
        whose files only the series writer writes."""
        path, patches = path.resolve(), (self.series_dir / PATCHES_DIR).resolve()
        if path == self.series_file.resolve() or path == patches or patches in path.parents:
            raise ConfigError([f"{option} {path}: forkbuild would write into the series' own files (series.toml, "
                               "patches/; a rebase backs up and restores every file there): choose a place outside "
                               "them"], source="command line")
        return path
