"""Loaded by every Python of a mutant's test run (its directory is first on
PYTHONPATH, so subprocesses the tests start get it too): makes one module of
the installed sglang load from the mutant's file instead, or not at all.

FORKBUILD_MUTANT: JSON {dotted module name: its file, or "" for "the module
is gone"}; a mutant names one module, a baseline every module its feature's
mutants touch (unchanged copies: the re-import itself must change nothing). Stdlib only: it runs inside
the test venv, which need not have forkbuild. The installed site-packages is
never written: each worker mutates only its own files.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import json
import linecache
import os
import sys


class _MutantLoader(importlib.machinery.SourceFileLoader):
    """Runs the mutant's code under the real module's file name: code that finds
    files beside itself (environ.py loads the generated guards module from its own
    directory) must see the installed package, not the mutant's directory."""

    def __init__(self, fullname, real_path, mutant_path):
        super().__init__(fullname, real_path)
        self.mutant_path = mutant_path

    def get_code(self, fullname):
        # Never the real file's cached bytecode: always the mutant's source.
        with open(self.mutant_path, "rb") as handle:
            source = handle.read()
        # Code that reads its own source reads it by the real file name through
        # linecache (inspect.getsource; Triton's @jit compiles a kernel from it):
        # it must get the mutant's lines. An entry without mtime is never
        # refreshed from the file by linecache.checkcache.
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


def install():
    """Put the finder of the mutant the environment names first (once)."""
    sources = json.loads(os.environ.get("FORKBUILD_MUTANT") or "{}")
    if not sources or any(isinstance(finder, _MutantFinder) for finder in sys.meta_path):
        return
    # Each mutant's file has its own path, but a stale .pyc next to it must never be read.
    sys.dont_write_bytecode = True
    sys.meta_path.insert(0, _MutantFinder(sources))


def _chain_next_sitecustomize():
    """This file shadows the interpreter's own sitecustomize (Debian's apport
    hook, a venv's): run that one too, as it would have run."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), "sitecustomize.py")
        if os.path.abspath(entry or os.getcwd()) != here and os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_forkbuild_next_sitecustomize", candidate)
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception:  # as site.py does: a broken sitecustomize never stops the interpreter
                pass
            return


install()
if __name__ == "sitecustomize":  # not when the fork server loads it by path
    _chain_next_sitecustomize()
