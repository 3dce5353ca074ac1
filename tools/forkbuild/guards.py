"""The guard value rule, mirrored by the patched sglang's EnvSwitch (a parity test keeps them
in step): a switch is on for 1/on/true/yes/y, off for 0/off/false/no/n or empty; anything
else is an error, never a silent default."""

from __future__ import annotations

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


def check_value(guard_type: str, value: str) -> None:
    """Raise ValueError when `value` is not valid for a guard of `guard_type`."""
    if guard_type == "switch":
        parse_switch(value)
    elif guard_type == "int":
        int(value)
    elif guard_type == "float":
        float(value)
    elif guard_type != "str":
        raise ValueError(f"unknown guard type {guard_type!r} (one of {', '.join(GUARD_TYPES)})")
