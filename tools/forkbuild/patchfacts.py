"""What reading a patch file found, kept on disk by the file's content: a re-apply, check or
status of unchanged patch files neither imports email and unidiff nor parses a diff again
(~25 ms of a 0.3 s re-apply of the 16-patch series).

One file per patch content in the cache (`<cache>/patch-facts/<key>`), the key a sha256 of
the patch's name and bytes and of the code that reads it (patchfile.py, this module, unidiff's
version, and Python's, whose email module reads the headers): a change to any of them is a new key,
so a record is never stale, only unused. A damaged record is read again from the patch.
Records are only written when a patch content is new; one written more than KEEP_DAYS ago
is removed then (a patch still in use is read again once: all a record ever saves). The
Context says where the records go; without one (a library caller, a test), nothing is kept.

A second store, TOML_FACTS (`<cache>/toml-facts/`), keeps what tomllib made of series.toml
the same way, keyed by the file's bytes, config.py's and Python's version (tomllib is part of it): a
re-run of an unchanged series imports no tomllib and parses no TOML (~8 ms; config.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forkbuild.fsutil import write_atomic

FACTS_DIR = "patch-facts"
TOML_FACTS_DIR = "toml-facts"
KEEP_DAYS = 90


class FactsStore:
    """Records of what a reader found in a text, each in its own file named by a key of the
    reader (`reader()`: the bytes that name its code) and the text."""

    def __init__(self, directory_name: str, reader: Callable[[], bytes]) -> None:
        self.directory: Path | None = None
        self._directory_name = directory_name
        self._read_reader = reader
        self._reader: bytes | None = None

    def keep_in(self, cache_dir: Path | None) -> None:
        """Keep records under `cache_dir` (None: keep none)."""
        self.directory = cache_dir / self._directory_name if cache_dir else None

    def key(self, name: str, text: str) -> str:
        digest = hashlib.sha256(self._reader_digest())
        digest.update(f"\0{name}\0".encode("utf-8", "surrogateescape"))
        digest.update(text.encode("utf-8", "surrogateescape"))
        return digest.hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        if self.directory is None:
            return None
        try:
            found = json.loads((self.directory / key).read_bytes())
        except (OSError, ValueError):
            return None  # not kept yet, or damaged: read the patch again
        return found if isinstance(found, dict) else None

    def put(self, key: str, facts: dict[str, Any]) -> None:
        if self.directory is None:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # Keys in their order: series.toml's tables are in the order the file gives (features, variants).
            write_atomic(self.directory / key, json.dumps(facts), durable=False)
            self._prune()
        except OSError:
            pass  # a read-only or full cache: the facts are read from the patch next time too

    def _prune(self) -> None:
        """Remove the records written more than KEEP_DAYS ago (the directory would only grow)."""
        assert self.directory is not None
        oldest = time.time() - KEEP_DAYS * 86400
        with os.scandir(self.directory) as records:
            for record in records:
                if record.is_file() and record.stat().st_mtime < oldest:
                    Path(record.path).unlink(missing_ok=True)

    def _reader_digest(self) -> bytes:
        if self._reader is None:
            self._reader = self._read_reader()
        return self._reader


def _code(*modules: str) -> hashlib._Hash:
    """A digest of this module (which writes and reads the records), `modules` of forkbuild and
    the Python running them."""
    reader = hashlib.sha256(Path(__file__).read_bytes())
    for module in modules:
        reader.update(Path(__file__).with_name(module).read_bytes())
    reader.update(sys.version.encode())
    return reader


def _patch_reader() -> bytes:
    """The code whose findings of a patch are kept: patchfile.py, the unidiff it parses diffs
    with and the Python whose email module reads the headers."""
    reader = _code("patchfile.py")
    spec = importlib.util.find_spec("unidiff")
    version = Path(spec.origin).with_name("__version__.py") if spec and spec.origin else None
    reader.update(version.read_bytes() if version and version.is_file() else b"unidiff?")
    return reader.digest()


def _toml_reader() -> bytes:
    """config.py, which keeps what tomllib (Python's: its version names the parser) made."""
    return _code("config.py").digest()


FACTS = FactsStore(FACTS_DIR, _patch_reader)
TOML_FACTS = FactsStore(TOML_FACTS_DIR, _toml_reader)


def keep_records_in(cache_dir: Path | None) -> None:
    """Both stores' records under `cache_dir` (None: keep none)."""
    FACTS.keep_in(cache_dir)
    TOML_FACTS.keep_in(cache_dir)
