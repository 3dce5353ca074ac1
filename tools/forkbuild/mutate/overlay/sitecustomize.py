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

MODULE = os.environ.get("FORKBUILD_MUTANT_MODULE", "")
SOURCE = os.environ.get("FORKBUILD_MUTANT_SOURCE", "")


class _MutantFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != MODULE:
            return None
        if not SOURCE:
            raise ModuleNotFoundError(f"No module named {fullname!r} (removed by the mutant)", name=fullname)
        # Where the real module lives decides whether it is a package.
        sys.meta_path.remove(self)
        try:
            real = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        locations = real.submodule_search_locations if real is not None else None
        return importlib.util.spec_from_file_location(
            fullname, SOURCE, loader=importlib.machinery.SourceFileLoader(fullname, SOURCE),
            submodule_search_locations=locations)


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


if MODULE:
    # Each mutant's file has its own path, but a stale .pyc next to it must never be read.
    sys.dont_write_bytecode = True
    sys.meta_path.insert(0, _MutantFinder())
_chain_next_sitecustomize()
