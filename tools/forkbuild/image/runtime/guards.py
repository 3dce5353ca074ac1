"""Guard values as sglang's fork guards read them (docs/DESIGN.md: EnvSwitch,
EnvStrictInt/Float/Str), and the guards an sglang tree declares."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from . import ImageError

SWITCH_ON = frozenset({"1", "on", "true", "yes", "y"})
SWITCH_OFF = frozenset({"", "0", "off", "false", "no", "n"})
PREFIX = "DSV41_"


def problem(kind: str, value: str) -> str | None:
    """Why `value` is invalid for a guard of type `kind` (sglang refuses to start); None if valid."""
    if kind == "switch":
        valid = value.strip().lower() in SWITCH_ON | SWITCH_OFF
        return None if valid else "not a switch (1/on/true/yes/y or 0/off/false/no/n/empty)"
    try:
        {"int": int, "float": float}.get(kind, str)(value)
    except ValueError:
        return f"not a valid {kind}"
    return None


def declared(package: Path) -> set[str]:
    """DSV41_* guards declared on sglang.srt.environ.Envs, loading environ.py by
    path: it is stdlib-only, while `import sglang` would need torch."""
    path = package / "srt" / "environ.py"
    spec = importlib.util.spec_from_file_location("_forkbuild_environ", path)
    if spec is None or spec.loader is None:
        raise ImageError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name for name in vars(module.Envs) if name.startswith(PREFIX)}
