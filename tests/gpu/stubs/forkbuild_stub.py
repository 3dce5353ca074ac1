"""Stand-in packages for the lent GPU run (tests/gpu/device-run.sh puts this
folder on PYTHONPATH; nothing else does).

sgl_kernel (sglang-kernel 0.4.10, a 373 MB wheel) and deep_gemm (sgl-deep-gemm)
are over what a call to the lent GPU can carry. On CUDA many sglang modules
import them at module level although the paths under test never call them.
In a stand-in every name (and every submodule, ``pkg.x.y``) resolves, and
calling anything raises StubCalled naming it, so a test that does reach a real
kernel fails instead of passing. ``__forkbuild_stub__`` lets `forkbuild
test-patch` name the stand-ins in its report.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class StubCalled(RuntimeError):
    """A test reached a kernel of a stand-in package."""


class _Stub:
    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args, **kwargs):
        package = self._name.split(".")[0]
        raise StubCalled(f"{self._name} called, but {package} is a stand-in on this machine "
                         "(tests/gpu/stubs): this path needs the real package")

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Stub(f"{self._name}.{attribute}")

    def __repr__(self) -> str:
        return f"<stand-in {self._name}>"


def _module_getattr(module_name: str):
    def __getattr__(attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(f"module {module_name!r} has no attribute {attribute!r}")
        return _Stub(f"{module_name}.{attribute}")

    return __getattr__


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(self.package + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__forkbuild_stub__ = True
        module.__getattr__ = _module_getattr(spec.name)
        return module

    def exec_module(self, module) -> None:
        pass


def make_stand_in(namespace: dict) -> None:
    """Turn the package whose globals are `namespace` into a stand-in."""
    name = namespace["__name__"]
    namespace["__forkbuild_stub__"] = True
    namespace["__getattr__"] = _module_getattr(name)
    sys.meta_path.insert(0, _SubmoduleFinder(name))
