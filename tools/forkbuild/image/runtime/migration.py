"""How this build reads each DSV41_* variable, next to how the runtime recipe
(adapter/sitecustomize.py and its adapters) read the same value, and which
values changed meaning on the move, with the value that keeps the old one.

The recipe's rules (from its sitecustomize.py):
- DSV41_WO_A_W8, DSV41_DRAFT_HEAD_FP8, DSV41_BLOCK_VERIFY, DSV41_FOLDED_FENCE:
  on unless `value.strip()` is one of '0', 'off', 'false', '' -- matched
  case-sensitively, so `no`, `n`, `Off`, `FALSE`, `2`, `enabled` were all ON.
  The recipe shows no rule for the other switches; the same rule is assumed
  (and said so in the report).
- DSV41_SERIAL_WEIGHT_LOAD: on only for exactly '1'.
- DSV41_DRAFT_TAU: the adapter was not installed for '', '1', '1.0' (tau 1).
- DSV41_VERIFY_CAP: off for '', '0', 'off'; 'conf:T' or N otherwise (so
  'Off' loaded the adapter; this build refuses what is not 0/off, N or conf:T).
- DSV41_WO_A_W8_MID / _DROP: read by the wo_a_w8 adapter only, which loaded
  only with DSV41_WO_A_W8 on: without it they did nothing.
- DSV41_MXFP8_BACKEND: .env.example documents b12x, cudnn and cutlass.

This build: switches are on for 1/on/true/yes/y and off for 0/off/false/no/n
or empty, case-insensitive; anything else stops startup (guards.py). Standard
library only (runs inside images; `forkbuild doctor --env` uses it too).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .guards import SWITCH_OFF, SWITCH_ON

RECIPE_OFF = ("0", "off", "false", "")  # sitecustomize's tuple, case-sensitive
RECIPE_RULE_SHOWN = {"DSV41_WO_A_W8", "DSV41_DRAFT_HEAD_FP8", "DSV41_BLOCK_VERIFY", "DSV41_FOLDED_FENCE"}
EXACTLY_ONE = {"DSV41_SERIAL_WEIGHT_LOAD"}
W8 = "DSV41_WO_A_W8"
W8_REFINEMENTS = ("DSV41_WO_A_W8_MID", "DSV41_WO_A_W8_DROP")
MXFP8 = "DSV41_MXFP8_BACKEND"
VERIFY_CAP = "DSV41_VERIFY_CAP"
# The names mxfp8-backend.patch accepts (Mxfp8DenseGemmBackend values, and the
# recipe's names cudnn and cutlass); a unit test keeps this equal to the patch.
MXFP8_BACKENDS = ("flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_cutedsl", "deep_gemm", "gfx95_dot_scaled",
                  "gfx95_mxfp8_native", "gfx95_mxfp8_aiter", "b12x", "flashinfer_cudnn")
MXFP8_ALIASES = {"cutlass": "flashinfer_cutlass", "cudnn": "flashinfer_cudnn"}
# The Python package a backend needs in the image (importable by this name).
BACKEND_PACKAGES = {"b12x": "b12x", "deep_gemm": "deep_gemm", "flashinfer_trtllm": "flashinfer",
                    "flashinfer_cutlass": "flashinfer", "flashinfer_cutedsl": "flashinfer",
                    "flashinfer_cudnn": "flashinfer"}


# Settings of the recipe this build does not read: its always-on engram backend
# (adapter/engram_backend.py, not in this series) and the head's memory fraction.
SETTING_NOTES = {
    "OFFLOAD_MODE": "the recipe's engram backend offload; that backend is not in this series: no effect",
    "DSV41_CACHE_GIB": "the recipe's engram backend cache; that backend is not in this series: no effect",
    "STATE_PATH": "the recipe's engram backend state; that backend is not in this series: no effect",
    "HEAD_MEM_FRACTION_STATIC": "serve passes it as --mem-fraction-static on node rank 0 only",
}


@dataclass(frozen=True)
class Reading:
    env: str
    value: str | None  # None: not set
    now: str  # how this build reads it
    recipe: str  # how the recipe read it
    changed: bool  # the meaning differs
    instead: str | None  # the value that keeps the recipe's meaning here
    refused: bool  # this build stops on it
    advice: str = ""  # what else to change, when another variable decides

    @property
    def hint(self) -> str:
        """What to write: never the value already set."""
        parts = [f"write {self.env}={self.instead}"] if self.instead not in (None, self.value) else []
        return ", ".join(parts + [self.advice] if self.advice else parts)


def _switch_now(value: str) -> bool | None:
    normalized = value.strip().lower()
    return True if normalized in SWITCH_ON else False if normalized in SWITCH_OFF else None


def _switch_recipe(env: str, value: str) -> bool:
    if env in EXACTLY_ONE:
        return value == "1"
    return value.strip() not in RECIPE_OFF


def _on_off(flag: bool) -> str:
    return "on" if flag else "off"


def read_guard(guard: Mapping[str, str], environ: Mapping[str, str]) -> Reading:
    """The reading of one guard of this build (`guard`: env, type, default)."""
    env, value = guard["env"], environ.get(guard["env"])
    if value is None:
        return Reading(env=env, value=None, now=f"unset: default {guard['default']!r}", recipe="", changed=False,
                       instead=None, refused=False)
    if env in W8_REFINEMENTS:
        return _read_w8_refinement(env, value, environ)
    if guard["type"] == "switch":
        return _read_switch(env, value)
    if env == "DSV41_DRAFT_TAU":
        return _read_tau(value)
    if env == MXFP8:
        return _read_mxfp8(value)
    if env == VERIFY_CAP:
        return _read_verify_cap(value)
    return _read_typed(env, value, guard["type"])


def _rule_note(env: str) -> str:
    if env in EXACTLY_ONE:
        return " (recipe: on only for exactly '1')"
    return "" if env in RECIPE_RULE_SHOWN else " (assumed: the recipe's switch rule)"


def _read_switch(env: str, value: str) -> Reading:
    now, before = _switch_now(value), _switch_recipe(env, value)
    now_text = "REFUSED: not a switch value, startup stops" if now is None else _on_off(now)
    changed = now != before
    return Reading(env=env, value=value, now=now_text, recipe=_on_off(before) + (_rule_note(env) if changed else ""),
                   changed=changed, instead=("1" if before else "0") if changed else None, refused=now is None)


def _read_w8_refinement(env: str, value: str, environ: Mapping[str, str]) -> Reading:
    w8_value = environ.get(W8, "0")
    before = _switch_recipe(env, value) and _switch_recipe(W8, w8_value)
    now, w8_now = _switch_now(value), _switch_now(w8_value)
    if now is None:
        now_text = "REFUSED: not a switch value, startup stops"
    elif now and not w8_now:
        now_text = f"REFUSED: on without {W8}, the model build stops"
    else:
        now_text = _on_off(now)
    refused = now is None or bool(now and not w8_now)
    effective = bool(now) and bool(w8_now)
    changed = refused or effective != before
    recipe = _on_off(before) + ("" if _switch_recipe(W8, w8_value) else f" (no effect: {W8} off)")
    instead, advice = (("1" if before else "0") if changed else None), ""
    if now and not w8_now:
        # Refused for want of DSV41_WO_A_W8: that is the variable to set.
        instead, advice = (None, f"set {W8}=1") if before else ("0", f"or set {W8}=1 to use it")
    return Reading(env=env, value=value, now=now_text, recipe=recipe, changed=changed, instead=instead,
                   refused=refused, advice=advice)


def _read_tau(value: str) -> Reading:
    before = 1.0 if value.strip() in ("", "1", "1.0") else _float(value)
    now = _float(value)
    now_text = f"tau {now:g}" if now is not None else "REFUSED: not a float, startup stops"
    if value.strip() in ("", "1", "1.0"):
        recipe = "tau 1 (adapter not loaded)"
    else:
        recipe = f"tau {before:g}" if before is not None else "not a float"
    changed = now != before
    return Reading(env="DSV41_DRAFT_TAU", value=value, now=now_text, recipe=recipe, changed=changed,
                   instead=f"{before:g}" if changed and before is not None else None, refused=now is None)


def _float(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def mxfp8_backend(value: str) -> str | None:
    """The backend a DSV41_MXFP8_BACKEND value names ('' for sglang's own choice), or None if refused."""
    name = value.strip()
    if not name:
        return ""
    name = MXFP8_ALIASES.get(name, name)
    return name if name in MXFP8_BACKENDS else None


def _read_mxfp8(value: str) -> Reading:
    backend = mxfp8_backend(value)
    if backend is None:
        now = f"REFUSED: not a backend name ({', '.join(MXFP8_BACKENDS)}, cudnn, cutlass), startup stops"
    else:
        now = f"backend {backend}" if backend else "sglang's own choice"
    return Reading(env=MXFP8, value=value, now=now, recipe="", changed=backend is None and bool(value.strip()),
                   instead=None, refused=backend is None)


def verify_cap(value: str) -> str | None:
    """How dspark-verify-cap.patch's read_verify_cap reads a value; None: it refuses it at startup."""
    text = value.strip()
    if text in ("", "0", "off"):
        return "off"
    if text.startswith("conf:"):
        threshold = _float(text[len("conf:"):])
        return f"cap conf:{threshold:g}" if threshold is not None and 0 < threshold <= 1 else None
    try:
        drafts = int(text)
    except ValueError:
        return None
    return None if drafts < 0 else f"cap {drafts} drafts" if drafts else "off"


def _read_verify_cap(value: str) -> Reading:
    now = verify_cap(value)
    if now is not None:
        return Reading(env=VERIFY_CAP, value=value, now=now, recipe="", changed=False, instead=None, refused=False)
    recipe_on = value.strip() not in ("", "0", "off")
    return Reading(env=VERIFY_CAP, value=value, now="REFUSED: not 0/off, N or conf:T (0 < T <= 1), startup stops",
                   recipe="its adapter loaded (not 0/off)" if recipe_on else "off", changed=True, instead=None,
                   refused=True, advice=f"write {VERIFY_CAP}=0 (off), N (at most N drafts) or conf:T")


def _read_typed(env: str, value: str, kind: str) -> Reading:
    convert = {"int": int, "float": float}.get(kind, str)
    try:
        convert(value)
    except ValueError:
        return Reading(env=env, value=value, now=f"REFUSED: not a valid {kind}, startup stops", recipe="",
                       changed=False, instead=None, refused=True)
    return Reading(env=env, value=value, now=value, recipe="", changed=False, instead=None, refused=False)


def readings(guards: Sequence[Mapping[str, str]], environ: Mapping[str, str]) -> list[Reading]:
    return [read_guard(guard, environ) for guard in guards]


def lines(found: list[Reading]) -> list[str]:
    """One line per variable: `NAME=value  now: ...  [recipe: ...; write NAME=X]`."""
    out = []
    for reading in found:
        shown = "(unset)" if reading.value is None else repr(reading.value)
        line = f"  {reading.env}={shown}  now: {reading.now}"
        if reading.changed:
            line += f"  | CHANGED from the recipe: {reading.recipe}" + (f"; {reading.hint}" if reading.hint else "")
        out.append(line)
    return out


def setting_notes(environ: Mapping[str, str]) -> list[str]:
    """A line per recipe setting present in `environ` that this build does not read as the recipe did."""
    return [f"{key}={environ[key]!r}: {note}" for key, note in SETTING_NOTES.items() if key in environ]


def missing_backend(environ: Mapping[str, str], built: Sequence[Mapping[str, str]]) -> str | None:
    """Why the MXFP8 backend the environment names cannot run in this Python, or None.
    The package is looked up (find_spec), not imported: importing b12x needs a GPU."""
    if not any(guard["env"] == MXFP8 for guard in built):
        return None
    backend = mxfp8_backend(environ.get(MXFP8, ""))
    package = BACKEND_PACKAGES.get(backend or "")
    if package is None or importlib.util.find_spec(package) is not None:
        return None
    return (f"{MXFP8}={environ.get(MXFP8)!r} names backend {backend}, but its package {package!r} is not "
            f"installed in this image's Python: the model stops at construction. Use a base image that "
            f"provides it (docker/README.md: 'MXFP8 backends'), or set {MXFP8}= (empty: sglang's own choice)")
