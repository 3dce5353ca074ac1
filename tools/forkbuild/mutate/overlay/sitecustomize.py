"""Loaded by every Python of a mutant's test run (its directory is first on
PYTHONPATH, so subprocesses the tests start get it too): makes one module of
the installed sglang load from the mutant's file instead, or not at all.

FORKBUILD_MUTANT_MODULE: the dotted module name; FORKBUILD_MUTANT_SOURCE: the
mutated file, or empty for "the module is gone". Stdlib only: it runs inside
the test venv, which need not have forkbuild. The installed site-packages is
never written: each worker mutates only its own files.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

class _MutantFinder(importlib.abc.MetaPathFinder):
    def __init__(self, module, source):
        self.module, self.source = module, source

    def find_spec(self, fullname, path, target=None):
        if fullname != self.module:
            return None
        if not self.source:
            raise ModuleNotFoundError(f"No module named {fullname!r} (removed by the mutant)", name=fullname)
        # Where the real module lives decides whether it is a package.
        sys.meta_path.remove(self)
        try:
            real = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        locations = real.submodule_search_locations if real is not None else None
        return importlib.util.spec_from_file_location(
            fullname, self.source, loader=importlib.machinery.SourceFileLoader(fullname, self.source),
            submodule_search_locations=locations)


def install():
    """Put the finder of the mutant the environment names first (once)."""
    module = os.environ.get("FORKBUILD_MUTANT_MODULE", "")
    if not module or any(isinstance(finder, _MutantFinder) for finder in sys.meta_path):
        return
    # Each mutant's file has its own path, but a stale .pyc next to it must never be read.
    sys.dont_write_bytecode = True
    sys.meta_path.insert(0, _MutantFinder(module, os.environ.get("FORKBUILD_MUTANT_SOURCE", "")))


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
