"""Loaded by every Python of a mutant's test run (first on PYTHONPATH, so the tests' subprocesses
too; stdlib only): FORKBUILD_MUTANT, JSON {dotted module name: its file, or "" for "gone"}, makes
those modules load from those files instead of the installed ones."""

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import linecache
import os
import sys


class _MutantLoader(importlib.machinery.SourceFileLoader):
    """Runs the mutant's code under the real file's name: code that finds files beside itself
    (environ.py's guards module) must see the installed package."""

    def __init__(self, fullname, real_path, mutant_path):
        super().__init__(fullname, real_path)
        self.mutant_path = mutant_path

    def get_code(self, fullname):
        # Never the real file's cached bytecode: always the mutant's source.
        with open(self.mutant_path, "rb") as handle:
            source = handle.read()
        # inspect.getsource (Triton's @jit) reads the real file name through linecache: give it
        # the mutant's lines; an entry without mtime is never refreshed by checkcache.
        text = importlib.util.decode_source(source)
        linecache.cache[self.path] = (len(text), None, text.splitlines(True), self.path)
        return compile(source, self.path, "exec", dont_inherit=True)


class _MutantFinder(importlib.abc.MetaPathFinder):
    def __init__(self, sources):
        self.sources = sources

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.sources:
            return None
        source = self.sources[fullname]
        if not source:
            raise ModuleNotFoundError(f"No module named {fullname!r} (removed by the mutant)", name=fullname)
        # Where the real module lives decides whether it is a package.
        sys.meta_path.remove(self)
        try:
            real = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        locations = real.submodule_search_locations if real is not None else None
        if real is not None and real.origin and os.path.isfile(real.origin):
            return importlib.util.spec_from_file_location(
                fullname, real.origin, loader=_MutantLoader(fullname, real.origin, source),
                submodule_search_locations=locations)
        return importlib.util.spec_from_file_location(
            fullname, source, loader=importlib.machinery.SourceFileLoader(fullname, source),
            submodule_search_locations=locations)


def _chain_next_sitecustomize():
    """This file shadows the interpreter's own sitecustomize (a venv's, Debian's): run that too."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), "sitecustomize.py")
        if os.path.abspath(entry or os.getcwd()) != here and os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_forkbuild_next_sitecustomize", candidate)
            with contextlib.suppress(Exception):  # as site.py does: a broken one never stops the interpreter
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_SOURCES = json.loads(os.environ.get("FORKBUILD_MUTANT") or "{}")
if _SOURCES and not any(isinstance(finder, _MutantFinder) for finder in sys.meta_path):
    sys.dont_write_bytecode = True  # each mutant's file has its own path, but a stale .pyc must never be read
    sys.meta_path.insert(0, _MutantFinder(_SOURCES))
if __name__ == "sitecustomize":  # not when the fork server loads it by path
    _chain_next_sitecustomize()
