"""The guard value rule, mirrored by the patched sglang's EnvSwitch (a parity test keeps them
in step): a switch is on for 1/on/true/yes/y, off for 0/off/false/no/n or empty; anything
else is an error, never a silent default."""

from __future__ import annotations

import math

SWITCH_ON = frozenset({"1", "on", "true", "yes", "y"})
SWITCH_OFF = frozenset({"", "0", "off", "false", "no", "n"})
GUARD_TYPES = ("switch", "int", "float", "str")


def parse_switch(value: str) -> bool:
    normalized = value.strip().lower()
    if normalized in SWITCH_ON:
        return True
    if normalized in SWITCH_OFF:
        return False
    raise ValueError(f"{value!r} is not a switch value (on: {sorted(SWITCH_ON)}; off: {sorted(SWITCH_OFF - {''})} or empty)")


INT_LIMIT = 2**63  # what a C long (torch, CUDA, a shape) holds: a 400-digit default is a mistake


def check_value(guard_type: str, value: str) -> None:
    """Raise ValueError when `value` is not valid for a guard of `guard_type`."""
    if guard_type == "switch":
        parse_switch(value)
    elif guard_type == "int":
        if len(value.strip()) > 30 or not -INT_LIMIT <= int(value) < INT_LIMIT:
            raise ValueError(f"{value[:40]!r}{'...' if len(value) > 40 else ''} is out of range for an int guard "
                             f"(-2**63 to 2**63-1)")
    elif guard_type == "float":
        if not math.isfinite(float(value)):
            raise ValueError(f"{value!r} is not a finite number (a float guard is a number: no nan or inf)")
    elif guard_type != "str":
        raise ValueError(f"unknown guard type {guard_type!r} (one of {', '.join(GUARD_TYPES)})")
