"""Which device the behaviour tests run on, and what the test Python has there.

`--device cuda` runs tests/patches with FORKBUILD_TEST_DEVICE=cuda: the
conftest then runs the tests marked `cuda` (skipped on a CPU run) and the
feature tests take sglang's CUDA import paths. The report records the device
and the torch/triton that ran, and every module that was a stand-in (a package
whose `__forkbuild_stub__` is true, e.g. an `sgl_kernel` that raises when called).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from forkbuild import process
from forkbuild.errors import BuildError

DEVICE_ENV = "FORKBUILD_TEST_DEVICE"
DEVICES = ("cpu", "cuda")
# Packages a lent machine may only have as a stand-in; the report names the ones that were.
STUBBABLE = ("sgl_kernel", "deep_gemm", "b12x", "flashinfer")

_PROBE = """
import importlib, importlib.util, json
import torch
try:
    import triton
    triton_version = triton.__version__
except ImportError:
    triton_version = ""
found = {"torch": torch.__version__, "triton": triton_version, "cuda_runtime": torch.version.cuda or "",
         "cuda_available": torch.cuda.is_available(), "name": "", "capability": "", "stubs": []}
if found["cuda_available"]:
    props = torch.cuda.get_device_properties(0)
    found["name"], found["capability"] = props.name, f"{props.major}.{props.minor}"
for module in STUBBABLE:
    if importlib.util.find_spec(module) is not None and getattr(importlib.import_module(module), "__forkbuild_stub__", False):
        found["stubs"].append(module)
print(json.dumps(found))
"""


@dataclass(frozen=True, kw_only=True)
class DeviceInfo:
    device: str  # cpu | cuda
    name: str  # the GPU's name, "" on cpu
    capability: str  # "9.0"; "" on cpu
    torch: str
    triton: str
    cuda_runtime: str  # torch.version.cuda, "" for a CPU build
    stubs: tuple[str, ...]  # modules that were stand-ins raising when called

    def record(self, variant: str) -> dict:
        """One more record of the variant's JSON report."""
        return {"variant": variant, "feature": "", "check": "device", "outcome": "pass",
                "reason": self.sentence(), **asdict(self), "stubs": list(self.stubs), "details": []}

    def sentence(self) -> str:
        where = f"{self.name} (SM {self.capability})" if self.device == "cuda" else "CPU"
        stubs = f"; stand-ins raising when called: {', '.join(self.stubs)}" if self.stubs else ""
        return f"{where}, torch {self.torch}, triton {self.triton or '-'}{stubs}"


def probe(python: Path, device: str) -> DeviceInfo:
    """What `python` has; for cuda, a GPU it can use, or a BuildError saying there is none."""
    if device not in DEVICES:
        raise BuildError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    code = f"STUBBABLE = {STUBBABLE!r}\n{_PROBE}"
    done = process.run([str(python), "-c", code])
    if done.status != 0:
        raise BuildError(f"{python} could not report its torch: {(done.stderr.strip().splitlines() or ['?'])[-1]}",
                         hint="the behaviour tests need the test venv: `nox -s test-patch`")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if device == "cuda" and not found["cuda_available"]:
        build = f"CUDA {found['cuda_runtime']} build" if found["cuda_runtime"] else "CPU build"
        raise BuildError(f"--device cuda: no CUDA GPU here ({python}: torch {found['torch']}, {build}, "
                         "torch.cuda.is_available() is False)",
                         hint="run it on a machine with an NVIDIA GPU and a CUDA build of torch; "
                              "without --device the tests run on the CPU")
    return DeviceInfo(device=device, name=found["name"] if device == "cuda" else "",
                      capability=found["capability"] if device == "cuda" else "",
                      torch=found["torch"], triton=found["triton"], cuda_runtime=found["cuda_runtime"],
                      stubs=tuple(found["stubs"]))
