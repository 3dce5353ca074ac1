"""Which guards a patched environ.py declares, read with `ast` (no import)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkbuild.config import GUARD_PREFIX, Guard
from forkbuild.guards import parse_switch

# series.toml's guard types and the Env field class each is declared with.
FIELD_CLASSES = {"switch": "EnvSwitch", "int": "EnvStrictInt", "float": "EnvStrictFloat", "str": "EnvStrictStr"}
REGISTRY_CLASS = "Envs"
_NO_DEFAULT = object()


@dataclass(frozen=True, kw_only=True)
class Declaration:
    env: str
    field_class: str
    default: Any  # the literal passed as default, or _NO_DEFAULT when it is not a literal
    line: int


def read_declarations(environ: Path) -> dict[str, Declaration]:
    """Every DSV41_* attribute of class Envs in `environ`."""
    tree = ast.parse(environ.read_bytes(), filename=str(environ))
    registry = next((node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == REGISTRY_CLASS), None)
    if registry is None:
        return {}
    found = {}
    for node in registry.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.startswith(GUARD_PREFIX):
                found[name] = _declaration(name, node.value, node.lineno)
    return found


def _declaration(name: str, value: ast.expr, line: int) -> Declaration:
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name):
        return Declaration(env=name, field_class=ast.unparse(value), default=_NO_DEFAULT, line=line)
    argument = value.args[0] if value.args else next((k.value for k in value.keywords if k.arg == "default"), None)
    try:
        default = ast.literal_eval(argument) if argument is not None else _NO_DEFAULT
    except ValueError:
        default = _NO_DEFAULT
    return Declaration(env=name, field_class=value.func.id, default=default, line=line)


def mismatch(guard: Guard, declaration: Declaration) -> str:
    """Why `declaration` does not match series.toml's `guard`; empty when it does."""
    wanted = FIELD_CLASSES[guard.type]
    if declaration.field_class != wanted:
        return f"declared as {declaration.field_class}, series.toml says type {guard.type!r} ({wanted})"
    if declaration.default is _NO_DEFAULT:
        return f"its default is not a literal; series.toml says {guard.default!r}"
    if not _same_default(guard, declaration.default):
        return f"default {declaration.default!r}, series.toml says {guard.default!r}"
    return ""


def _same_default(guard: Guard, value: Any) -> bool:
    # series.toml writes defaults as env strings; the declaration holds the parsed value.
    if guard.type == "switch":
        return isinstance(value, bool) and value == parse_switch(guard.default)
    if guard.type == "int":
        return type(value) is int and value == int(guard.default)
    if guard.type == "float":
        return type(value) in (int, float) and float(value) == float(guard.default)
    return isinstance(value, str) and value == guard.default
