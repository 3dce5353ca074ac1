"""`forkbuild bisect` on planted faults: two features that fail the command only
together, one that fails it alone, a flaky command, a bisect killed halfway and
resumed, and runtime mode (guards toggled through the environment).

The fixture: a wheel-mode series whose features a, b, c, d (each requiring
`core`) each add one module to the package. The probe command looks inside the
wheel it is given (FORKBUILD_WHEELS), so a probe passes or fails on what was
really built, not on what forkbuild claims."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

from forkbuild import cli
from wheelkit import DEMO_FILES, VERSION_MODULE, layout, make_patch, make_wheel

FEATURES = ("a", "b", "c", "d")

SERIES = """\
[series]
name = "bisect-demo"
default_variant = "all"

[upstream]
name = "demo"
version = "1.0"
package_root = "python"
source = "wheel"

[[upstream.wheels]]
python_tag = "py3"
filename = "{wheel}"
sha256 = "{sha}"

[features.core]
description = "the base"
{features}
[[patches]]
file = "core.patch"
feature = "core"
unguarded = "adds a module"
{patches}
[variants.all]
description = "everything"
features = ["core", {quoted}]
[variants.all.env]
DSV41_A = "1"
DSV41_C = "7"

[variants.stock]
description = "nothing"
features = []
"""

# Fails (exit 3) when the wheel it is given holds every module named in argv[1] (comma-separated).
# With a counter file in argv[2], fails every odd run regardless (a flaky command).
CHECK = textwrap.dedent('''\
    import os, sys, zipfile
    wheels = os.environ["FORKBUILD_WHEELS"].split(os.pathsep)
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    built = {name.split("/")[1][len("feat_"):-3] for name in names if name.startswith("demo/feat_")}
    assert ",".join(sorted(built)) == ",".join(sorted(f for f in os.environ["FORKBUILD_FEATURES"].split(",") if f != "core"))
    if len(sys.argv) > 2:
        count = int(open(sys.argv[2]).read() or 0) if os.path.exists(sys.argv[2]) else 0
        open(sys.argv[2], "w").write(str(count + 1))
        if count % 2 == 0:
            sys.exit(5)
    sys.exit(3 if set(sys.argv[1].split(",")) <= built else 0)
    ''')


@pytest.fixture
def demo(tmp_path):
    cache = tmp_path / "cache"
    wheel = make_wheel(cache / "wheels")
    root = tmp_path / "series"
    (root / "patches").mkdir(parents=True)
    files = layout({**DEMO_FILES, "demo/_version.py": VERSION_MODULE.format(version="1.0").encode()})
    (root / "patches" / "core.patch").write_text(make_patch(
        tmp_path / "work-core", base=files, edits={"python/demo/core_guard.py": b"CORE = 1\n"},
        subject="demo: core", feature="core"))
    features, patches = "", ""
    for name in FEATURES:
        (root / "patches" / f"{name}.patch").write_text(make_patch(
            tmp_path / f"work-{name}", base=files,
            edits={f"python/demo/feat_{name}.py": f"from demo import envs  # envs.DSV41_{name.upper()}\n".encode()},
            subject=f"demo: feature {name}", feature=name))
        kind = "int" if name == "c" else "switch"
        features += (f'\n[features.{name}]\ndescription = "{name}"\nrequires = ["core"]\n'
                     f'guards = [{{ env = "DSV41_{name.upper()}", type = "{kind}", default = "0" }}]\n')
        patches += f'\n[[patches]]\nfile = "{name}.patch"\nfeature = "{name}"\n'
    (root / "series.toml").write_text(SERIES.format(
        wheel=wheel.name, sha=hashlib.sha256(wheel.read_bytes()).hexdigest(), features=features, patches=patches,
        quoted=", ".join(f'"{name}"' for name in FEATURES)))
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    return root, cache, script


def bisect(demo, *args: str) -> int:
    root, cache, _ = demo
    return cli.main(["-C", str(root), "--cache", str(cache), "bisect", *args])


def result(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_two_features_that_fail_only_together(demo, capsys):
    _, _, script = demo
    assert bisect(demo, "--json", "--", sys.executable, str(script), "b,d") == 0
    found = result(capsys)
    assert found["minimal"] == ["b", "d"]
    probes = {tuple(probe["features"]): probe["outcome"] for probe in found["probes"]}
    assert probes[()] == "pass" and probes[("core", "a", "b", "c", "d")] == "fail"
    assert probes[("b",)] == "pass" and probes[("d",)] == "pass"  # neither alone


def test_one_feature_that_fails_alone(demo, capsys):
    _, _, script = demo
    assert bisect(demo, "--json", "--", sys.executable, str(script), "c") == 0
    assert result(capsys)["minimal"] == ["c"]


def test_a_flaky_command_needs_retries(demo, capsys, tmp_path):
    _, _, script = demo
    counter = tmp_path / "runs"
    # Every first try fails: without retries the very first probe (stock) "fails".
    assert bisect(demo, "--json", "--", sys.executable, str(script), "a,c", str(counter)) == 15
    err = " ".join(capsys.readouterr().err.split())
    (log,) = (demo[0] / "build" / "bisect").glob("*.json")
    assert "fails on stock" in err and f"(its exit codes: {log})" in err and "then run it with --restart" in err
    # Run again as it is, the log answers for the command: it says so, and how to go on.
    assert bisect(demo, "--json", "--", sys.executable, str(script), "a,c", str(counter)) == 15
    assert "this bisect did not finish" in capsys.readouterr().err
    counter.unlink()
    # The hint followed: --restart (the old log holds the flaky answers).
    assert bisect(demo, "--json", "--restart", "--retries", "1", "--", sys.executable, str(script), "a,c",
                  str(counter)) == 0
    found = result(capsys)
    assert found["minimal"] == ["a", "c"]
    assert all(probe["exit_codes"][0] == 5 for probe in found["probes"])  # each probe's first try flaked


def test_stock_must_pass_and_the_full_set_must_fail(demo, capsys):
    assert bisect(demo, "--", sys.executable, "-c", "import sys; sys.exit(0)") == 15
    assert "passes with every feature" in capsys.readouterr().err


def test_a_killed_bisect_resumes_from_its_probe_log(demo, tmp_path):
    root, cache, script = demo
    runs = tmp_path / "runs.txt"
    # A command that records each run and kills forkbuild (its parent) on the 4th run.
    killer = tmp_path / "killer.py"
    killer.write_text(textwrap.dedent(f'''\
        import os, signal, subprocess, sys
        with open({str(runs)!r}, "a") as log:
            log.write(os.environ["FORKBUILD_FEATURES"] + "\\n")
        if sum(1 for _ in open({str(runs)!r})) == 4 and os.environ.get("KILL") == "1":
            os.kill(os.getppid(), signal.SIGKILL)
        sys.exit(subprocess.call([sys.executable, {str(script)!r}, "b,d"]))
        '''))
    command = [sys.executable, "-m", "forkbuild", "-C", str(root), "--cache", str(cache), "bisect", "--json"]
    env = {**os.environ, "KILL": "1"}
    killed = subprocess.run([*command, "--", sys.executable, str(killer)], env=env, capture_output=True, text=True)
    assert killed.returncode == -9
    assert len(runs.read_text().splitlines()) == 4
    # Without --continue: refused, the log named.
    again = subprocess.run([*command, "--", sys.executable, str(killer)], capture_output=True, text=True)
    assert again.returncode == 15 and "--continue" in again.stderr
    resumed = subprocess.run([*command, "--continue", "--", sys.executable, str(killer)], capture_output=True,
                             text=True)
    assert resumed.returncode == 0, resumed.stderr
    found = json.loads(resumed.stdout)
    assert found["minimal"] == ["b", "d"] and found["replayed"] == 3  # the 4th probe died with forkbuild
    run_lines = runs.read_text().splitlines()
    assert len(run_lines) == 4 + len(found["probes"]) - 3  # no probe run twice, except the one killed


def test_the_same_bisect_run_twice_prints_the_same_result_and_restart_starts_over(demo, tmp_path, capsys):
    _, _, script = demo
    runs = tmp_path / "runs.txt"
    counting = tmp_path / "counting.py"
    counting.write_text(textwrap.dedent(f'''\
        import subprocess, sys
        open({str(runs)!r}, "a").write("run\\n")
        sys.exit(subprocess.call([sys.executable, {str(script)!r}, "b,d"]))
        '''))
    command = ["--json", "--", sys.executable, str(counting)]
    assert bisect(demo, *command) == 0
    first, probed = result(capsys), len(runs.read_text().splitlines())
    assert bisect(demo, *command) == 0  # no file to delete, no probe run again
    again = result(capsys)
    assert again["minimal"] == first["minimal"] == ["b", "d"] and again["replayed"] == len(first["probes"])
    assert len(runs.read_text().splitlines()) == probed
    assert bisect(demo, "--restart", *command) == 0
    assert result(capsys)["replayed"] == 0 and len(runs.read_text().splitlines()) == 2 * probed
    # A damaged log is named with the way on, whatever JSON it holds; the hint followed starts over.
    (log,) = (demo[0] / "build" / "bisect").glob("*.json")
    for damaged in ("[]", '{"schema": 1, "probes": [{"nope": 1}]}', '{"sch'):
        log.write_text(damaged)
        assert bisect(demo, *command) == 15
        err = capsys.readouterr().err
        assert "unreadable probe log" in err or "a probe log of another bisect" in err, err
    assert bisect(demo, "--restart", *command) == 0 and result(capsys)["minimal"] == ["b", "d"]


def test_runtime_mode_toggles_guards_on_one_build(demo, capsys, tmp_path):
    _, _, script = demo
    # Fails when DSV41_A is on and DSV41_C is set to 7 (the variant's runtime defaults); the build holds
    # every module, whatever the probe (runtime mode builds once).
    fault = ("import os, sys, zipfile; "
             "assert len(zipfile.ZipFile(os.environ['FORKBUILD_WHEELS']).namelist()) > 0; "
             "sys.exit(3 if os.environ['DSV41_A'] == '1' and os.environ['DSV41_C'] == '7' else 0)")
    assert bisect(demo, "--runtime", "--variant", "all", "--json", "--", sys.executable, "-c", fault) == 0
    found = result(capsys)
    assert found["minimal"] == ["a", "c"]
    builds = list((demo[0] / "build" / "bisect" / "wheels").glob("*.whl"))
    assert len(builds) == 1 and "+all." in builds[0].name
    assert "c" in {name for probe in found["probes"] for name in probe["features"]}


def test_runtime_mode_sets_every_candidates_guard_on_or_off(demo, tmp_path, capsys):
    seen = tmp_path / "seen.jsonl"
    record = ("import json, os, sys; "
              f"open({str(seen)!r}, 'a').write(json.dumps({{k: v for k, v in os.environ.items() "
              "if k.startswith(('DSV41_', 'FORKBUILD_FEATURES'))}) + '\\n'); "
              "sys.exit(3 if os.environ['DSV41_B'] == '1' else 0)")
    assert bisect(demo, "--runtime", "--json", "--", sys.executable, "-c", record) == 0
    assert result(capsys)["minimal"] == ["b"]
    first, second = [json.loads(line) for line in seen.read_text().splitlines()[:2]]
    # stock: every guard at its default; the full set: on values (variant's, or 1 for a switch)
    assert first == {"DSV41_A": "0", "DSV41_B": "0", "DSV41_C": "0", "DSV41_D": "0", "FORKBUILD_FEATURES": ""}
    assert second == {"DSV41_A": "1", "DSV41_B": "1", "DSV41_C": "7", "DSV41_D": "1", "FORKBUILD_FEATURES": "a,b,c,d"}
