"""Guards: the EnvSwitch truthiness rule and the startup build report."""

from __future__ import annotations

import importlib.util
import json
import logging

import pytest

FEATURE = "guards"

LEFT_OUT_GUARD = "DSV41_TEST_LEFT_OUT"
TEST_SWITCH = "DSV41_TEST_SWITCH"


def _manifest(**overrides) -> dict:
    manifest = {
        "schema": 1,
        "series": "dsv41",
        "variant": "tp3",
        "version": "0.5.23+tp3.abc",
        "series_hash": "0123456789abcdef" * 4,
        "features": ["guards", "loop_abort"],
        "guards": [],
        "series_guards": [
            {"env": LEFT_OUT_GUARD, "feature": "left_out_feature", "type": "switch", "default": "0"},
        ],
        "runtime_settings": ["MODEL_PATH", "DSV41_CACHE_GIB"],
        "env_defaults": {},
        "patches": [],
    }
    return {**manifest, **overrides}


@pytest.fixture
def declare_switch(monkeypatch):
    """Declare a throwaway EnvSwitch guard in Envs, as a feature patch would."""
    from sglang.srt import environ

    def declare(name: str, default: bool = False):
        monkeypatch.setattr(environ.EnvField, "_allow_set_name", True)
        field = environ.EnvSwitch(default)
        field.__set_name__(environ.Envs, name)
        monkeypatch.setattr(environ.Envs, name, field, raising=False)
        return field

    return declare


def _report_module(monkeypatch, tmp_path):
    """The report module reading its manifest from tmp_path instead of the package.

    Imported in the test body, not a fixture: on a build without it the test
    must fail, not error."""
    from sglang.srt import dsv41_build_report

    monkeypatch.setattr(dsv41_build_report, "files", lambda package: tmp_path)
    return dsv41_build_report


def _write_manifest(tmp_path, manifest: dict) -> None:
    (tmp_path / "_forkbuild_manifest.json").write_text(json.dumps(manifest))


def _logged(caplog, level: int) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno == level)


# -- EnvSwitch: the seed's .env spellings, one rule, strict -------------------

@pytest.mark.guard_on
@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", False), ("1", True), ("off", False), ("on", True), ("false", False),
     ("true", True), ("", False), (None, False), ("ON", True), (" 1 ", True)],
    ids=["0", "1", "off", "on", "false", "true", "empty", "unset", "ON", "padded-1"],
)
def test_switch_truthiness(declare_switch, monkeypatch, value, expected):
    field = declare_switch(TEST_SWITCH)
    if value is not None:
        monkeypatch.setenv(TEST_SWITCH, value)

    assert field.get() is expected


@pytest.mark.guard_on
@pytest.mark.parametrize("value", ["2", "maybe", "enabled"])
def test_switch_invalid_value_raises_naming_the_variable(declare_switch, monkeypatch, value):
    field = declare_switch(TEST_SWITCH)
    monkeypatch.setenv(TEST_SWITCH, value)

    with pytest.raises(ValueError, match=TEST_SWITCH):
        field.get()


@pytest.mark.guard_on
def test_strict_int_invalid_value_raises_naming_the_variable(monkeypatch):
    from sglang.srt import environ

    monkeypatch.setattr(environ.EnvField, "_allow_set_name", True)
    field = environ.EnvStrictInt(32)
    field.__set_name__(environ.Envs, "DSV41_TEST_INT")
    monkeypatch.setenv("DSV41_TEST_INT", "thirty")

    with pytest.raises(ValueError, match="DSV41_TEST_INT"):
        field.get()


@pytest.mark.guard_off
def test_upstream_envbool_keeps_its_own_rule(monkeypatch):
    """The fork's rule is its own type: sglang's EnvBool still warns on 'on' and
    falls back to its default."""
    from sglang.srt.environ import envs

    monkeypatch.setenv("SGLANG_LOG_MS", "on")

    with pytest.warns(UserWarning, match="SGLANG_LOG_MS"):
        assert envs.SGLANG_LOG_MS.get() is False


# -- startup report -------------------------------------------------------------

@pytest.mark.guard_on
def test_report_logs_variant_and_features_from_manifest(tmp_path, caplog, monkeypatch):
    report_module = _report_module(monkeypatch, tmp_path)
    _write_manifest(tmp_path, _manifest())

    with caplog.at_level(logging.INFO, logger=report_module.__name__):
        report_module.log_build_report()

    info = _logged(caplog, logging.INFO)
    assert "variant tp3" in info
    assert "features built in: guards, loop_abort" in info
    assert _logged(caplog, logging.WARNING) == ""


@pytest.mark.guard_on
def test_report_without_manifest_says_so(caplog, monkeypatch, tmp_path):
    report_module = _report_module(monkeypatch, tmp_path)

    with caplog.at_level(logging.INFO, logger=report_module.__name__):
        report_module.log_build_report()

    assert "this build has no manifest" in _logged(caplog, logging.INFO)


@pytest.mark.guard_on
def test_warns_loudly_for_guard_of_left_out_feature(tmp_path, monkeypatch, caplog):
    report_module = _report_module(monkeypatch, tmp_path)
    _write_manifest(tmp_path, _manifest())
    monkeypatch.setenv(LEFT_OUT_GUARD, "1")

    with caplog.at_level(logging.INFO, logger=report_module.__name__):
        report_module.log_build_report()

    warning = _logged(caplog, logging.WARNING)
    assert "NO EFFECT" in warning
    assert f"{LEFT_OUT_GUARD}: guard of feature 'left_out_feature'" in warning
    assert "variant tp3" in warning


@pytest.mark.guard_on
def test_warns_about_unknown_variable_with_a_suggestion(tmp_path, monkeypatch, caplog):
    report_module = _report_module(monkeypatch, tmp_path)
    _write_manifest(tmp_path, _manifest())
    monkeypatch.setenv(LEFT_OUT_GUARD + "T", "1")

    with caplog.at_level(logging.INFO, logger=report_module.__name__):
        report_module.log_build_report()

    warning = _logged(caplog, logging.WARNING)
    assert f"{LEFT_OUT_GUARD}T: unknown DSV41 variable" in warning
    assert f"perhaps you meant {LEFT_OUT_GUARD}?" in warning


@pytest.mark.guard_on
def test_runtime_setting_is_not_warned_about(tmp_path, monkeypatch, caplog):
    report_module = _report_module(monkeypatch, tmp_path)
    _write_manifest(tmp_path, _manifest())
    monkeypatch.setenv("DSV41_CACHE_GIB", "16")

    with caplog.at_level(logging.INFO, logger=report_module.__name__):
        report_module.log_build_report()

    assert _logged(caplog, logging.WARNING) == ""


@pytest.mark.guard_on
def test_declared_guard_is_reported_not_warned_about(declare_switch, tmp_path, monkeypatch, caplog):
    report_module = _report_module(monkeypatch, tmp_path)
    _write_manifest(tmp_path, _manifest())
    declare_switch(TEST_SWITCH)
    monkeypatch.setenv(TEST_SWITCH, "on")

    with caplog.at_level(logging.INFO, logger=report_module.__name__):
        report_module.log_build_report()

    assert f"{TEST_SWITCH}=True" in _logged(caplog, logging.INFO)
    assert _logged(caplog, logging.WARNING) == ""


@pytest.mark.guard_on
def test_without_manifest_undeclared_variable_is_warned_about(monkeypatch, tmp_path):
    report_module = _report_module(monkeypatch, tmp_path)
    report = report_module.build_report(
        manifest=None, environ_vars={"DSV41_LOOP_ABORTT": "1"}, guard_values={"DSV41_LOOP_ABORT": False}
    )

    assert "DSV41_LOOP_ABORTT: not a guard of this build; perhaps you meant DSV41_LOOP_ABORT?" in [
        line.strip() for line in report.warnings
    ]


@pytest.mark.guard_on
def test_bad_guard_value_stops_the_launch(declare_switch, monkeypatch, tmp_path):
    report_module = _report_module(monkeypatch, tmp_path)
    declare_switch(TEST_SWITCH)
    monkeypatch.setenv(TEST_SWITCH, "maybe")

    with pytest.raises(ValueError, match=TEST_SWITCH):
        report_module.log_build_report()


@pytest.mark.guard_on
def test_server_launch_reports_the_build_after_logging_is_configured(monkeypatch):
    from sglang.srt.entrypoints import engine

    calls = []

    class Stop(Exception):
        pass

    def report():
        calls.append("report")
        raise Stop

    monkeypatch.setattr(engine, "configure_logger", lambda server_args: calls.append("configure_logger"))
    monkeypatch.setattr(engine, "log_build_report", report)

    with pytest.raises(Stop):
        engine.Engine._launch_subprocesses(
            server_args=object(),
            init_tokenizer_manager_func=None,
            run_scheduler_process_func=None,
            run_detokenizer_process_func=None,
        )
    assert calls == ["configure_logger", "report"]


@pytest.mark.guard_on
def test_report_of_a_build_declaring_no_guards_says_none(tmp_path, caplog, monkeypatch):
    # A variant holding only the guards feature: the generated module is empty.
    from sglang.srt import environ

    report_module = _report_module(monkeypatch, tmp_path)
    _write_manifest(tmp_path, _manifest(features=["guards"]))
    for name in [name for name in vars(environ.Envs) if name.startswith("DSV41_")]:
        monkeypatch.delattr(environ.Envs, name)

    with caplog.at_level(logging.INFO, logger=report_module.__name__):
        report_module.log_build_report()

    assert "DSV41 guards: none declared" in _logged(caplog, logging.INFO).splitlines()


# -- the guards hook in environ.py ---------------------------------------------------

def _run_environ_in(directory, monkeypatch):
    """Runs sglang.srt.environ's module code, as the import system holds it, as
    a module whose file lies in `directory`: the hook looks for the generated
    dsv41_guards.py beside its own file, and the installed one is always there."""
    import sys
    import types

    spec = importlib.util.find_spec("sglang.srt.environ")
    code = spec.loader.get_code(spec.name)
    module = types.ModuleType("dsv41_environ_elsewhere")
    module.__file__ = str(directory / "environ.py")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look their module up
    exec(code, vars(module))
    return module


@pytest.mark.guard_on
def test_environ_registers_the_generated_guards_beside_it(tmp_path, monkeypatch):
    import os
    import shutil

    from sglang.srt import environ

    generated = os.path.join(os.path.dirname(environ.__file__), "dsv41_guards.py")
    assert os.path.isfile(generated), f"this sglang has no generated guards module: {generated}"
    shutil.copy(generated, tmp_path / "dsv41_guards.py")
    module = _run_environ_in(tmp_path, monkeypatch)
    declared = {name: type(field).__name__ for name, field in vars(environ.Envs).items() if name.startswith("DSV41_")}
    assert declared  # every variant that builds the guards feature in declares some
    assert {name: type(field).__name__ for name, field in vars(module.Envs).items()
            if name.startswith("DSV41_")} == declared


@pytest.mark.guard_on
def test_a_tree_without_the_generated_module_fails_at_import_naming_it(tmp_path, monkeypatch):
    # A tree patched by quilt or git am: the series' patches, not forkbuild's generated file.
    missing = tmp_path / "dsv41_guards.py"
    with pytest.raises(ImportError) as failure:
        _run_environ_in(tmp_path, monkeypatch)
    message = str(failure.value)
    assert message.startswith(f"{missing} is missing") and "forkbuild apply" in message


# -- not built in ----------------------------------------------------------------

@pytest.mark.absent
def test_absent_no_switch_type_and_no_report():
    from sglang.srt import environ

    assert not hasattr(environ, "EnvSwitch")
    assert not [name for name in vars(environ.Envs) if name.startswith("DSV41_")]
    assert importlib.util.find_spec("sglang.srt.dsv41_build_report") is None
