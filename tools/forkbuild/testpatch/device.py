"""Where the behaviour tests run (`--device cuda`: FORKBUILD_TEST_DEVICE=cuda, the `cuda`
tests too), and the report's record of the torch/triton that ran and of every stand-in module
(a package whose `__forkbuild_stub__` is true)."""

from __future__ import annotations

import json
from pathlib import Path

from forkbuild.errors import BuildError
from forkbuild.io import process

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


def probe(python: Path, device: str) -> dict:
    """The report's device record of `python`; for cuda, a BuildError when it has no GPU to use."""
    code = f"STUBBABLE = {STUBBABLE!r}\n{_PROBE}"
    done = process.run([str(python), "-c", code])
    if done.status != 0:
        raise BuildError(f"{python} could not report its torch: {(done.stderr.strip().splitlines() or ['?'])[-1]}",
                         hint="the behaviour tests need the test venv: `nox -s test-patch`")
    found, cuda = json.loads(done.stdout.strip().splitlines()[-1]), device == "cuda"
    if cuda and not found["cuda_available"]:
        build = f"CUDA {found['cuda_runtime']} build" if found["cuda_runtime"] else "CPU build"
        raise BuildError(f"--device cuda: no CUDA GPU here ({python}: torch {found['torch']}, {build}, "
                         "torch.cuda.is_available() is False)",
                         hint="run it on a machine with an NVIDIA GPU and a CUDA build of torch; "
                              "without --device the tests run on the CPU")
    info = {"device": device, "name": found["name"] if cuda else "", "capability": found["capability"] if cuda else "",
            "torch": found["torch"], "triton": found["triton"], "cuda_runtime": found["cuda_runtime"],
            "stubs": found["stubs"]}
    where = f"{info['name']} (SM {info['capability']})" if cuda else "CPU"
    stubs = f"; stand-ins raising when called: {', '.join(info['stubs'])}" if info["stubs"] else ""
    sentence = f"{where}, torch {info['torch']}, triton {info['triton'] or '-'}{stubs}"
    return {"feature": "", "check": "device", "outcome": "pass", "reason": sentence, **info, "details": []}
