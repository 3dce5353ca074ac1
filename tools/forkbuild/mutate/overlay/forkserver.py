"""A mutate worker in the test venv (stdlib only; `python forkserver.py MODULE...`): imports the
modules once (torch and the rest are ~90 % of a test run) and forks a child per request, which
forgets every sglang module, installs the overlay's finder and runs pytest.
Protocol: a JSON request per stdin line {"tests", "rootdir", "env", "log", "timeout"}; a JSON
reply per line {"rc", "timeout", "seconds"}."""

import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PARENT = os.getppid()  # the forkbuild process; when it dies, the worker stops
PACKAGES: set[str] = set()  # the top-level packages of the preloaded modules (sglang): what a child forgets
PLUGINS: list[str] = []  # the pytest11 entry points of the venv, as pytest would load them


def _child(request):
    os.setpgid(0, 0)  # its own group: a timeout kills the tests' subprocesses too
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.update(request["env"])
    if json.loads(request["env"].get("FORKBUILD_MUTANT") or "{}"):
        # Every module of the preloaded packages goes: a module registering itself at import
        # (sglang's MoE registry) must not meet its old registration.
        for name in [name for name in sys.modules if name.split(".")[0] in PACKAGES]:
            del sys.modules[name]
        importlib.invalidate_caches()
    spec = importlib.util.spec_from_file_location("_forkbuild_overlay", os.path.join(HERE, "sitecustomize.py"))
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # installs the mutant's finder

    import pytest

    os.chdir(request["rootdir"])
    # Plugins are named, not found: scanning every distribution's entry points costs a second.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    plugins = [argument for plugin in PLUGINS for argument in ("-p", plugin)]
    return int(pytest.main(["-x", "-q", "-p", "no:cacheprovider", *plugins, "--rootdir", request["rootdir"],
                            *request["tests"]], plugins=[_First(request.get("first") or [])]))


class _First:
    """The tests named first (node ids) run before the rest, each part in its order."""

    def __init__(self, first):
        self.first = set(first)

    def pytest_collection_modifyitems(self, items):
        items.sort(key=lambda item: item.nodeid not in self.first)  # stable


def _serve(request):
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        # It ends as `python -m pytest` would (atexit, output flushed), never serving; 70 if it raised.
        try:
            code = _child(request)
        except BaseException:
            traceback.print_exc()
            code = 70
        sys.exit(code)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"rc": os.waitstatus_to_exitcode(status), "timeout": False, "seconds": time.monotonic() - start}
        if time.monotonic() > start + request["timeout"] or os.getppid() != PARENT:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            if os.getppid() != PARENT:
                sys.exit(1)  # forkbuild is gone (killed): so is this worker, and its run
            return {"rc": None, "timeout": True, "seconds": time.monotonic() - start}
        time.sleep(0.05)


def main():
    PACKAGES.update(name.split(".")[0] for name in sys.argv[1:])
    for name in sys.argv[1:]:
        with contextlib.suppress(Exception):  # the child imports it again and reports what breaks
            importlib.import_module(name)

    import pytest  # noqa: F401  (loaded once, for every child)

    for entry in importlib.metadata.entry_points(group="pytest11"):
        importlib.import_module(entry.value.split(":")[0])
        PLUGINS.append(entry.value.split(":")[0])
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(_serve(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
