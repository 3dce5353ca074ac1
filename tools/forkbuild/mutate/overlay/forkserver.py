"""A mutate worker inside the test venv (stdlib only; `python forkserver.py MODULE...`).

Importing torch, transformers and the rest under sglang takes ~90 % of a
feature test run; the mutated sglang module is a small part. So the server
imports the named modules once, then forgets every `sglang` module (its
third-party imports stay loaded), and forks one child per request. The child
makes the mutated module load from the mutant's file (the overlay's finder;
its environment carries the mutant to subprocesses through sitecustomize) and
runs pytest in a fresh sglang import.

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
FORGET = ("sglang",)


def _preload(modules):
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # the child imports it again and reports what breaks
            pass
    for name in [name for name in sys.modules if name.split(".")[0] in FORGET]:
        del sys.modules[name]
    importlib.invalidate_caches()


def _child(request):
    os.setpgid(0, 0)  # its own group: a timeout kills the tests' subprocesses too
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.update(request["env"])
    spec = importlib.util.spec_from_file_location("_forkbuild_overlay", os.path.join(HERE, "sitecustomize.py"))
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # installs the mutant's finder

    import pytest

    os.chdir(request["rootdir"])
    code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "--rootdir", request["rootdir"], *request["tests"]])
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


def main():
    _preload(sys.argv[1:])
    import pytest  # noqa: F401  (loaded once, for every child)

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(_serve(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
