"""A mutate worker inside the test venv (stdlib only; `python forkserver.py MODULE...`).

Importing torch, transformers and sglang takes nearly all of a feature test
run. So the server imports the named modules once, noting when each sglang
module started and finished loading, and forks one child per request. The
child forgets the mutated module and every sglang module that finished loading
after it started (only those can hold a reference to it taken at import),
makes the mutated module load from the mutant's file (the overlay's finder;
its environment carries the mutant to subprocesses through sitecustomize), and
runs pytest: what it imports again is the mutant and what depends on it.

Protocol: one JSON request per stdin line {"tests": [...], "rootdir", "env": {...},
"log", "timeout"}; one JSON reply per line {"rc", "timeout", "seconds"}.
"""

import importlib
import importlib.util
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = set()  # the top-level packages of the preloaded modules (sglang): what a child may forget
STARTED = {}  # module -> order in which its loading started
FINISHED = {}  # module -> order in which its loading finished
_clock = [0]


def _tick():
    _clock[0] += 1
    return _clock[0]


class _TimedLoader:
    """Delegates to the real loader; notes when the module's code ran."""

    def __init__(self, loader, name):
        self._loader, self._name = loader, name

    def __getattr__(self, attribute):
        return getattr(self._loader, attribute)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        STARTED[self._name] = _tick()
        try:
            self._loader.exec_module(module)
        finally:
            FINISHED[self._name] = _tick()


class _Recorder:
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] not in PACKAGES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _TimedLoader(spec.loader, fullname)
                return spec
        return None


def _preload(modules):
    PACKAGES.update(name.split(".")[0] for name in modules)
    recorder = _Recorder()
    sys.meta_path.insert(0, recorder)
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # the child imports it again and reports what breaks
                pass
    finally:
        sys.meta_path.remove(recorder)


def _forget(modules):
    """Drop `modules` and every sglang module that may have bound one of them
    at import: those that finished loading after the first of them started.
    One never loaded here is held by nothing; it loads as the mutant."""
    starts = [STARTED[module] for module in modules if module in STARTED]
    if not starts:
        return
    started = min(starts)
    for name in [name for name in sys.modules if name.split(".")[0] in PACKAGES]:
        if name in modules or FINISHED.get(name, started + 1) > started \
                or any(name.startswith(module + ".") for module in modules):
            forgotten = sys.modules.pop(name)
            # `from package import name` takes the package's attribute when it
            # has one: a kept package must not hand out the forgotten module.
            parent, _, child = name.rpartition(".")
            if parent in sys.modules and getattr(sys.modules[parent], child, None) is forgotten:
                delattr(sys.modules[parent], child)
    importlib.invalidate_caches()


def _child(request):
    os.setpgid(0, 0)  # its own group: a timeout kills the tests' subprocesses too
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.update(request["env"])
    _forget(set(json.loads(request["env"].get("FORKBUILD_MUTANT") or "{}")))
    spec = importlib.util.spec_from_file_location("_forkbuild_overlay", os.path.join(HERE, "sitecustomize.py"))
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # installs the mutant's finder

    import pytest

    os.chdir(request["rootdir"])
    # Plugins are named, not found: scanning every installed distribution's
    # entry points would cost each run a second or two.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    plugins = [argument for plugin in PLUGINS for argument in ("-p", plugin)]
    code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", *plugins, "--rootdir", request["rootdir"],
                        *request["tests"]])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


def _serve(request):
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            _child(request)
        finally:
            os._exit(70)
    deadline = start + request["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"rc": os.waitstatus_to_exitcode(status), "timeout": False, "seconds": time.monotonic() - start}
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return {"rc": None, "timeout": True, "seconds": time.monotonic() - start}
        time.sleep(0.05)


PLUGINS = []  # the pytest11 entry points of the venv, as pytest would load them


def main():
    _preload(sys.argv[1:])
    import importlib.metadata

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
