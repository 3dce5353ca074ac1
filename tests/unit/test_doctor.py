"""Migration from the runtime recipe: every value whose meaning changed is flagged
with the value that keeps the old meaning (forkbuild doctor --env, and the
image's doctor through the same readings); the MXFP8 backend's package."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from forkbuild.cli import main
from forkbuild.errors import ConfigError
from forkbuild.fleet.envfile import parse_env
from forkbuild.series.config import load_series
from forkbuild_runtime import doctor as image_doctor
from forkbuild_runtime import migration

REPO = Path(__file__).resolve().parents[2]
SERIES = load_series(REPO / "series.toml")
GUARDS = {g.env: {"env": g.env, "type": g.type, "default": g.default} for g in SERIES.all_guards()}


def reading(env: str, value: str, **others: str) -> migration.Reading:
    return migration.read_guard(GUARDS[env], {env: value, **others})


@pytest.mark.parametrize(("env", "value", "instead", "refused"), [
    # Off now, on under sitecustomize's case-sensitive ('0', 'off', 'false', '').
    ("DSV41_WO_A_W8", "no", "1", False),
    ("DSV41_WO_A_W8", "n", "1", False),
    ("DSV41_BLOCK_VERIFY", "Off", "1", False),
    ("DSV41_FOLDED_FENCE", "FALSE", "1", False),
    # On under sitecustomize, refused now.
    ("DSV41_DRAFT_HEAD_FP8", "2", "1", True),
    ("DSV41_FOLDED_FENCE", "enabled", "1", True),
    # "exactly 1" under the recipe.
    ("DSV41_SERIAL_WEIGHT_LOAD", "yes", "0", False),
    ("DSV41_SERIAL_WEIGHT_LOAD", "true", "0", False),
    # Empty tau: the adapter was not loaded (tau 1); now not a float.
    ("DSV41_DRAFT_TAU", "", "1", True),
])
def test_a_changed_meaning_is_flagged_with_the_value_to_write(env, value, instead, refused):
    found = reading(env, value)
    assert found.changed and found.instead == instead and found.refused == refused
    # The value to write means under this build what the old one meant under the recipe.
    assert not reading(env, instead).changed


@pytest.mark.parametrize(("env", "value"), [
    ("DSV41_WO_A_W8", "0"), ("DSV41_WO_A_W8", "1"), ("DSV41_WO_A_W8", "off"), ("DSV41_WO_A_W8", ""),
    ("DSV41_SERIAL_WEIGHT_LOAD", "1"), ("DSV41_SERIAL_WEIGHT_LOAD", "0"), ("DSV41_DRAFT_TAU", "1"),
    ("DSV41_DRAFT_TAU", "0.8"), ("DSV41_VERIFY_CAP", "conf:0.5"), ("DSV41_VERIFY_CAP", "0"),
    ("DSV41_MXFP8_BACKEND", "b12x"), ("DSV41_LOOP_ABORT_MAX_PERIOD", "16"),
])
def test_the_recipes_own_values_keep_their_meaning(env, value):
    found = reading(env, value)
    assert not found.changed and not found.refused


def test_mid_and_drop_without_w8_were_a_no_op_and_now_stop_the_model_build():
    alone = reading("DSV41_WO_A_W8_MID", "1", DSV41_WO_A_W8="0")
    assert alone.refused and alone.changed and alone.instead == "0" and "model build stops" in alone.now
    assert not reading("DSV41_WO_A_W8_DROP", "1", DSV41_WO_A_W8="1").changed
    assert not reading("DSV41_WO_A_W8_DROP", "0", DSV41_WO_A_W8="0").changed


def test_drop_without_w8_never_advises_the_value_already_set():
    # W8 'no' was on under the recipe, so DROP=1 dropped there; this build refuses DROP
    # for want of W8: the hint is to set W8, not to write DROP=1 (already set).
    found = reading("DSV41_WO_A_W8_DROP", "1", DSV41_WO_A_W8="no")
    assert found.refused and found.changed
    assert found.hint == "set DSV41_WO_A_W8=1"
    # W8 off: DROP did nothing under the recipe; both ways out are named.
    found = reading("DSV41_WO_A_W8_DROP", "1", DSV41_WO_A_W8="0")
    assert found.hint == "write DSV41_WO_A_W8_DROP=0, or set DSV41_WO_A_W8=1 to use it"


@pytest.mark.parametrize("value", ["Off", "OFF", "no", "conf:", "conf:1.5", "-3", "2.5"])
def test_a_verify_cap_the_patch_refuses_is_refused(value):
    found = reading("DSV41_VERIFY_CAP", value)
    assert found.refused and found.changed and "REFUSED" in found.now
    assert "write DSV41_VERIFY_CAP=0 (off)" in found.hint


@pytest.mark.parametrize(("value", "now"), [("off", "off"), ("", "off"), ("0", "off"), (" 2 ", "cap 2 drafts"),
                                            ("conf:0.5", "cap conf:0.5")])
def test_a_verify_cap_the_patch_takes_reads_as_it_does(value, now):
    found = reading("DSV41_VERIFY_CAP", value)
    assert found.now == now and not found.refused and not found.changed


def test_doctor_env_fails_on_verify_cap_off_and_names_the_recipes_other_settings(tmp_path, capsys):
    env = tmp_path / "recipe.env"
    env.write_text("DSV41_VERIFY_CAP=Off\nOFFLOAD_MODE=nvme\nDSV41_CACHE_GIB=16\nSTATE_PATH=/state\n"
                   "HEAD_MEM_FRACTION_STATIC=0.95\n")
    assert main(["-C", str(REPO), "doctor", "--env", str(env)]) == 1
    err = capsys.readouterr().err
    assert f"{env}:1: DSV41_VERIFY_CAP='Off' meant its adapter loaded (not 0/off) under the runtime recipe" in err
    assert "REFUSED" in err
    for line, key in enumerate(("OFFLOAD_MODE", "DSV41_CACHE_GIB", "STATE_PATH"), start=2):
        assert f"{env}:{line}: {key}=" in err and "not in this series: no effect" in err
    assert f"{env}:5: HEAD_MEM_FRACTION_STATIC='0.95': serve passes it as --mem-fraction-static on node rank 0" in err


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory", "utf16", "binary", "huge"])
def test_doctor_env_refuses_what_is_not_an_env_file_without_hanging(tmp_path, kind):
    import os
    import subprocess

    path = {"dev_zero": Path("/dev/zero"), "directory": tmp_path}.get(kind, tmp_path / "x.env")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "utf16":
        path.write_text("DSV41_WO_A_W8=1\n", encoding="utf-16")
    elif kind == "binary":
        path.write_bytes(b"A=1\n\0\x01\x02")
    elif kind == "huge":
        path.write_bytes(b"# padding\n" * 200_000)
    done = subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(REPO), "doctor", "--env", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and str(path) in done.stderr
    assert {"fifo": "not a regular file", "dev_zero": "not a regular file", "directory": "not a regular file",
            "utf16": "not UTF-8 text", "binary": "binary: a NUL byte", "huge": "larger than"}[kind] in done.stderr


@pytest.mark.parametrize(("value", "backend"), [("cudnn", "flashinfer_cudnn"), ("cutlass", "flashinfer_cutlass"),
                                                ("b12x", "b12x"), ("", "")])
def test_the_recipes_mxfp8_names_are_accepted(value, backend):
    assert migration.mxfp8_backend(value) == backend
    assert not reading("DSV41_MXFP8_BACKEND", value).refused


def test_an_unknown_mxfp8_name_is_refused():
    assert reading("DSV41_MXFP8_BACKEND", "cublas").refused


def test_the_backend_names_are_the_patchs():
    """The names the image's doctor accepts are the ones mxfp8-backend.patch does."""
    text = (REPO / "patches" / "mxfp8-backend.patch").read_text()
    upstream = {"flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_cutedsl", "deep_gemm", "gfx95_dot_scaled",
                "gfx95_mxfp8_native", "gfx95_mxfp8_aiter"}  # sglang 0.5.23's Mxfp8DenseGemmBackend
    added = set(re.findall(r'^\+    [A-Z0-9_]+ = "([a-z0-9_]+)"$', text, re.MULTILINE))
    assert set(migration.MXFP8_BACKENDS) == upstream | added
    aliases = re.search(r"^\+_MXFP8_BACKEND_ALIASES = (\{.*?\})$", text, re.MULTILINE | re.DOTALL)
    assert aliases, "the patch lost its recipe aliases"
    assert eval(aliases[1].replace("+", "")) == migration.MXFP8_ALIASES  # a dict literal of str: str


def test_doctor_env_cites_each_values_line_and_fails_on_changes(tmp_path, capsys):
    env = tmp_path / "recipe.env"
    env.write_text("# the recipe's .env\nMODEL_PATH=/models/m\nexport DSV41_WO_A_W8=no\n"
                   "DSV41_DRAFT_TAU=\nDSV41_MXFP8_BACKEND=\"cudnn\"  # the alternative\nDSV41_TYPO=1\n")
    assert main(["-C", str(REPO), "doctor", "--env", str(env), "--variant", "tp4"]) == 1
    captured = capsys.readouterr()
    assert f"{env}:3: DSV41_WO_A_W8='no' meant on" in captured.err and "write DSV41_WO_A_W8=1" in captured.err
    assert f"{env}:4: DSV41_DRAFT_TAU=''" in captured.err and "write DSV41_DRAFT_TAU=1" in captured.err
    assert f"{env}:6: DSV41_TYPO='1': not a guard" in captured.err
    assert "DSV41_MXFP8_BACKEND='cudnn'  now: backend flashinfer_cudnn" in captured.out
    assert "DSV41_SERIAL_WEIGHT_LOAD='1'  now: on  [the image's ENV (variant default)]" in captured.out


def test_doctor_env_passes_a_file_that_means_the_same(tmp_path, capsys):
    env = tmp_path / "ok.env"
    env.write_text("DSV41_WO_A_W8=0\nDSV41_DRAFT_TAU=1\nDSV41_MXFP8_BACKEND=cutlass\n")
    assert main(["-C", str(REPO), "doctor", "--env", str(env)]) == 0


def test_a_bad_env_line_is_named():
    with pytest.raises(ConfigError, match=r"line 2: not KEY=VALUE"):
        parse_env("A=1\nthis is not\n", source="x.env")
    with pytest.raises(ConfigError, match=r"line 1: not KEY=VALUE"):
        parse_env('A="unterminated\n', source="x.env")
    assert parse_env("export A='x # y'\nB=2 # two\n", source="x.env")["A"].value == "x # y"


def test_a_env_is_read_as_the_shell_reads_it_or_refused_with_how_to_write_it():
    # what `set -a; . .env` gives each (bash), and compose alike
    read = parse_env("A= # note\nB=x # c\nC='$HOME \\n'\nD=\"a b\"\n", source="x.env")
    assert {key: item.value for key, item in read.items()} == {"A": "", "B": "x", "C": "$HOME \\n", "D": "a b"}
    for line, why in (("E=$HOME", "would expand"), ('F="${X}"', "would expand"), ("G=a$(id)", "would expand"),
                      ('H="a\\\\b"', "read backslashes in double quotes differently")):
        with pytest.raises(ConfigError, match=why):
            parse_env(line + "\n", source="x.env")


def test_the_image_doctor_reports_changed_meanings_and_refusals(monkeypatch):
    built = [{**GUARDS[env], "feature": "f"} for env in ("DSV41_WO_A_W8", "DSV41_WO_A_W8_MID", "DSV41_MXFP8_BACKEND")]
    manifest = {"variant": "tp4", "series": "dsv41", "series_hash": "0" * 64, "upstream": {"version": "0.5.23"},
                "features": ["f"], "guards": built, "series_guards": built}
    monkeypatch.setattr(image_doctor, "read_manifest", lambda package: manifest)
    monkeypatch.setattr(image_doctor, "package_dir", lambda name: Path("/nonexistent"))
    monkeypatch.setattr(image_doctor, "installed", lambda name: type("D", (), {"version": "0.5.23+tp4", "site": "/"}))
    lines, warnings, errors = image_doctor.report({"DSV41_WO_A_W8": "no", "DSV41_WO_A_W8_MID": "1",
                                                   "DSV41_MXFP8_BACKEND": "cutlass"})
    assert any("DSV41_WO_A_W8='no' meant on under the runtime recipe" in w and "write DSV41_WO_A_W8=1" in w
               for w in warnings)
    assert any(e.startswith("DSV41_WO_A_W8_MID='1': REFUSED") for e in errors)
    assert any("DSV41_MXFP8_BACKEND='cutlass'  now: backend flashinfer_cutlass" in line for line in lines)


@pytest.mark.skipif(importlib.util.find_spec("b12x") is not None, reason="b12x is installed here")
def test_a_backend_whose_package_is_missing_is_named():
    built = [GUARDS["DSV41_MXFP8_BACKEND"]]
    message = migration.missing_backend({"DSV41_MXFP8_BACKEND": "b12x"}, built)
    assert message and "package 'b12x' is not installed" in message and "MXFP8 backends" in message
    assert migration.missing_backend({"DSV41_MXFP8_BACKEND": ""}, built) is None
    assert migration.missing_backend({}, built) is None
    assert migration.missing_backend({"DSV41_MXFP8_BACKEND": "b12x"}, []) is None  # feature not built in


def test_a_backend_whose_package_is_there_passes(tmp_path, monkeypatch):
    (tmp_path / "b12x").mkdir()
    (tmp_path / "b12x" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("b12x", None)
    assert migration.missing_backend({"DSV41_MXFP8_BACKEND": "b12x"}, [GUARDS["DSV41_MXFP8_BACKEND"]]) is None
