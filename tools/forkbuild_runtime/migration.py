"""How this build reads each DSV41_* variable (as sglang's fork guards do, docs/DESIGN.md:
EnvSwitch, EnvStrictInt/Float/Str) beside how the runtime recipe's sitecustomize.py and
adapters read it, and the value that keeps a changed meaning (docs/images.md, "Moving from
the runtime recipe"). `forkbuild doctor --env` uses it too.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PREFIX = "DSV41_"
SWITCH_ON = frozenset({"1", "on", "true", "yes", "y"})
SWITCH_OFF = frozenset({"", "0", "off", "false", "no", "n"})
# The recipe's switch rule: on unless the stripped value is one of these, case-sensitively
# (`no`, `Off`, `2` were on); its source shows the rule for these switches, assumed for the rest.
RECIPE_OFF = ("0", "off", "false", "")
RECIPE_RULE_SHOWN = {"DSV41_WO_A_W8", "DSV41_DRAFT_HEAD_FP8", "DSV41_BLOCK_VERIFY", "DSV41_FOLDED_FENCE"}
W8 = "DSV41_WO_A_W8"
W8_REFINEMENTS = ("DSV41_WO_A_W8_MID", "DSV41_WO_A_W8_DROP")  # read by the W8 adapter only
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
# What the image's `serve` reads (docker/entrypoint.sh: SETTINGS and the names around it; a unit
# test keeps them equal): a .env name close to one of these but not it is a likely typo.
SERVE_SETTINGS = ("MODEL_PATH", "HOST", "PORT", "EXTRA_SGLANG_ARGS", "HEAD_MEM_FRACTION_STATIC",
                  "SERVED_MODEL_NAME", "TP_SIZE", "EP_SIZE", "NNODES", "NODE_RANK", "DIST_INIT_ADDR",
                  "CONTEXT_LENGTH", "MEM_FRACTION_STATIC", "MAX_RUNNING_REQUESTS", "CUDA_GRAPH_MAX_BS_DECODE",
                  "CHUNKED_PREFILL_SIZE", "MAX_TOTAL_TOKENS", "SPEC_ALGO", "DSPARK_BLOCK_SIZE")

# Settings of the recipe this build does not read: its engram backend (not in this series)
# and the head's memory fraction.
NO_EFFECT = "that backend is not in this series: no effect"
SETTING_NOTES = {
    "OFFLOAD_MODE": f"the recipe's engram backend offload; {NO_EFFECT}",
    "DSV41_CACHE_GIB": f"the recipe's engram backend cache; {NO_EFFECT}",
    "STATE_PATH": f"the recipe's engram backend state; {NO_EFFECT}",
    "HEAD_MEM_FRACTION_STATIC": "serve passes it as --mem-fraction-static on node rank 0 only",
}


@dataclass(frozen=True)
class Reading:
    env: str
    value: str | None  # None: not set
    now: str  # how this build reads it
    recipe: str = ""  # how the recipe read it
    changed: bool = False  # the meaning differs
    instead: str | None = None  # the value that keeps the recipe's meaning here
    refused: bool = False  # this build stops on it
    advice: str = ""  # what else to change, when another variable decides

    @property
    def hint(self) -> str:
        """What to write: never the value already set."""
        parts = [f"write {self.env}={self.instead}"] if self.instead not in (None, self.value) else []
        return ", ".join(parts + [self.advice] if self.advice else parts)


def problem(kind: str, value: str) -> str | None:
    """Why `value` is invalid for a guard of type `kind` (sglang refuses to start); None if valid."""
    if kind == "switch":
        valid = value.strip().lower() in SWITCH_ON | SWITCH_OFF
        return None if valid else "not a switch (1/on/true/yes/y or 0/off/false/no/n/empty)"
    try:
        number = {"int": int, "float": float}.get(kind, str)(value)
    except ValueError:
        return f"not a valid {kind}"
    # as forkbuild's own rule (forkbuild.series.guards.check_value): finite, and an int that fits 64 bits
    if kind == "float" and not math.isfinite(number):
        return "not a finite float"
    if kind == "int" and (len(value.strip()) > 30 or not -2**63 <= number < 2**63):
        return "out of range for an int"
    return None


def _switch_now(value: str) -> bool | None:
    normalized = value.strip().lower()
    return True if normalized in SWITCH_ON else False if normalized in SWITCH_OFF else None


def _switch_recipe(env: str, value: str) -> bool:
    return value == "1" if env == "DSV41_SERIAL_WEIGHT_LOAD" else value.strip() not in RECIPE_OFF


def _on_off(flag: bool | None) -> str:
    return "REFUSED: not a switch value, startup stops" if flag is None else "on" if flag else "off"


def _float(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def read_guard(guard: Mapping[str, str], environ: Mapping[str, str]) -> Reading:
    """The reading of one guard of this build (`guard`: env, type, default)."""
    env, value = guard["env"], environ.get(guard["env"])
    if value is None:
        return Reading(env, None, f"unset: default {guard['default']!r}")
    if env in W8_REFINEMENTS:
        return _read_w8_refinement(env, value, environ)
    if guard["type"] == "switch":
        now, before = _switch_now(value), _switch_recipe(env, value)
        if now == before:
            return Reading(env, value, _on_off(now))
        rule = (" (recipe: on only for exactly '1')" if env == "DSV41_SERIAL_WEIGHT_LOAD" else
                "" if env in RECIPE_RULE_SHOWN else " (assumed: the recipe's switch rule)")
        return Reading(env, value, _on_off(now), _on_off(before) + rule, True, "1" if before else "0", now is None)
    if env == "DSV41_DRAFT_TAU":
        now_tau = _float(value)
        if value.strip() not in ("", "1", "1.0") or now_tau == 1.0:  # the recipe read a float as this build does
            return Reading(env, value, "REFUSED: not a float, startup stops" if now_tau is None else f"tau {now_tau:g}",
                           refused=now_tau is None)
        return Reading(env, value, "REFUSED: not a float, startup stops", "tau 1 (adapter not loaded)", True, "1", True)
    if env == MXFP8:
        backend = mxfp8_backend(value)
        if backend is None:
            return Reading(env, value, f"REFUSED: not a backend name ({', '.join(MXFP8_BACKENDS)}, cudnn, cutlass), "
                           "startup stops", changed=bool(value.strip()), refused=True)
        return Reading(env, value, f"backend {backend}" if backend else "sglang's own choice")
    if env == VERIFY_CAP:
        cap = verify_cap(value)
        if cap is not None:
            return Reading(env, value, cap)
        return Reading(env, value, "REFUSED: not 0/off, N or conf:T (0 < T <= 1), startup stops",
                       "its adapter loaded (not 0/off)" if value.strip() not in ("", "0", "off") else "off", True,
                       refused=True, advice=f"write {VERIFY_CAP}=0 (off), N (at most N drafts) or conf:T")
    if problem(guard["type"], value):
        return Reading(env, value, f"REFUSED: not a valid {guard['type']}, startup stops", refused=True)
    return Reading(env, value, value)


def _read_w8_refinement(env: str, value: str, environ: Mapping[str, str]) -> Reading:
    w8_value = environ.get(W8, "0")
    before = _switch_recipe(env, value) and _switch_recipe(W8, w8_value)
    now, w8_now = _switch_now(value), _switch_now(w8_value)
    without_w8 = bool(now and not w8_now)
    now_text = f"REFUSED: on without {W8}, the model build stops" if without_w8 else _on_off(now)
    changed = now is None or without_w8 or bool(now and w8_now) != before
    recipe = _on_off(before) + ("" if _switch_recipe(W8, w8_value) else f" (no effect: {W8} off)")
    instead, advice = (("1" if before else "0") if changed else None), ""
    if without_w8:
        # Refused for want of DSV41_WO_A_W8: that is the variable to set.
        instead, advice = (None, f"set {W8}=1") if before else ("0", f"or set {W8}=1 to use it")
    return Reading(env, value, now_text, recipe, changed, instead, now is None or without_w8, advice)


def mxfp8_backend(value: str) -> str | None:
    """The backend a DSV41_MXFP8_BACKEND value names ('' for sglang's own choice), or None if refused."""
    name = MXFP8_ALIASES.get(value.strip(), value.strip())
    return name if name in ("", *MXFP8_BACKENDS) else None


def verify_cap(value: str) -> str | None:
    """How dspark-verify-cap.patch's read_verify_cap reads a value; None: it refuses it at startup."""
    text = value.strip()
    if text.startswith("conf:"):
        threshold = _float(text[len("conf:"):])
        return f"cap conf:{threshold:g}" if threshold is not None and 0 < threshold <= 1 else None
    if text in ("", "0", "off"):
        return "off"
    try:
        drafts = int(text)
    except ValueError:
        return None
    return None if drafts < 0 else f"cap {drafts} drafts" if drafts else "off"


def readings(guards: Sequence[Mapping[str, str]], environ: Mapping[str, str]) -> list[Reading]:
    return [read_guard(guard, environ) for guard in guards]


def lines(found: list[Reading]) -> list[str]:
    """One line per variable: `NAME=value  now: ...  [| CHANGED from the recipe: ...; write NAME=X]`."""
    return [f"  {r.env}={'(unset)' if r.value is None else repr(r.value)}  now: {r.now}"
            + (f"  | CHANGED from the recipe: {r.recipe}" + (f"; {r.hint}" if r.hint else "") if r.changed else "")
            for r in found]


def setting_notes(environ: Mapping[str, str]) -> list[str]:
    """A line per recipe setting present in `environ` that this build does not read as the recipe did."""
    return [f"{key}={environ[key]!r}: {note}" for key, note in SETTING_NOTES.items() if key in environ]


def backend_package(environ: Mapping[str, str], built: Sequence[Mapping[str, str]]) -> str | None:
    """The package the MXFP8 backend the environment names needs (None: none, or no such guard built in)."""
    if not any(guard["env"] == MXFP8 for guard in built):
        return None
    return BACKEND_PACKAGES.get(mxfp8_backend(environ.get(MXFP8, "")) or "")


def missing_backend(environ: Mapping[str, str], built: Sequence[Mapping[str, str]]) -> str | None:
    """Why the MXFP8 backend the environment names cannot run in this Python, or None.
    The package is looked up (find_spec), not imported: importing b12x needs a GPU."""
    package = backend_package(environ, built)
    if package is None or importlib.util.find_spec(package) is not None:
        return None
    backend = mxfp8_backend(environ.get(MXFP8, ""))
    return (f"{MXFP8}={environ.get(MXFP8)!r} names backend {backend}, but its package {package!r} is not "
            f"installed in this image's Python: the model stops at construction. Pin its wheel in series.toml "
            f"[[runtime.packages]] or use a base image that provides it (docker/README.md: 'MXFP8 backends'), "
            f"or set {MXFP8}= (empty: sglang's own choice)")
