"""`packages --pick DIR` at build time: where the variant's ENV names an MXFP8 backend whose
package the base lacks, the wheel of that package among the build context's pins (series.toml
[[runtime.packages]]), its sha256 checked: its path on stdout, for the Dockerfile's
`pip install --no-deps --no-index`; what it found on stderr."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
from pathlib import Path

from . import ImageError, migration
from .records import package_dir, read_manifest


def pick(directory: Path) -> tuple[Path | None, str]:
    """The wheel to install (None: none) and why; ImageError when its file does not match its sha256."""
    built = read_manifest(package_dir("sglang")).get("guards", [])
    package = migration.backend_package(os.environ, built)
    if package is None:
        return None, "MXFP8 backend: none needs a package"
    if importlib.util.find_spec(package) is not None:
        return None, f"MXFP8 backend package {package}: {found(package)} (from the base)"
    pins = json.loads((directory / "pins.json").read_text())
    pin = next((pin for pin in pins if package in pin["provides"]), None)
    if pin is None:
        return None, f"MXFP8 backend package {package}: the base lacks it and series.toml pins no wheel for it"
    wheel = directory / pin["filename"]
    with wheel.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    if digest != pin["sha256"]:
        raise ImageError(f"{pin['filename']}: sha256 {digest} does not match its pin {pin['sha256']} "
                         "(series.toml [[runtime.packages]]): not installed")
    return wheel, f"MXFP8 backend package {package}: the base lacks it, installing {pin['filename']} (sha256 matches the pin)"


def found(package: str) -> str:
    """`<distribution> <version>` of an importable package (the distribution that ships it)."""
    names = importlib.metadata.packages_distributions().get(package, [package])
    try:
        return f"{names[0]} {importlib.metadata.version(names[0])}"
    except importlib.metadata.PackageNotFoundError:
        return f"{package} (version unknown)"
