"""serial_weight_load: with the guard on, checkpoint weights load inline, never on the pool."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

FEATURE = "serial_weight_load"
GUARD = "DSV41_SERIAL_WEIGHT_LOAD"


class RecordingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A real thread pool that remembers what was submitted to it."""

    def __init__(self):
        super().__init__(max_workers=1)
        self.submitted = 0

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def _load_one(submit, *, use_async: bool):
    """Load one weight the way the model loaders do; return (executor, futures, thread that ran it)."""
    ran_on = []
    futures = []
    with RecordingExecutor() as executor:
        submit(
            executor=executor,
            futures=futures,
            use_async=use_async,
            func=lambda: ran_on.append(threading.current_thread()),
        )
        for future in futures:
            future.result()
    return executor, futures, ran_on


def _submit_as_deepseek_imports_it():
    # deepseek_weight_loader imports the function by name: the patch to the
    # definition must reach it.
    from sglang.srt.models.deepseek_common import deepseek_weight_loader

    return deepseek_weight_loader.maybe_executor_submit


@pytest.mark.guard_off
def test_async_load_uses_the_pool_by_default():
    executor, futures, ran_on = _load_one(_submit_as_deepseek_imports_it(), use_async=True)

    assert executor.submitted == 1
    assert len(futures) == 1
    assert ran_on != [threading.main_thread()]


@pytest.mark.guard_off
def test_sync_load_runs_inline_by_default():
    executor, futures, ran_on = _load_one(_submit_as_deepseek_imports_it(), use_async=False)

    assert executor.submitted == 0
    assert ran_on == [threading.main_thread()]


@pytest.mark.guard_on
@pytest.mark.parametrize("value", ["1", "on", "true"])
def test_guard_on_no_executor_is_used(monkeypatch, value):
    monkeypatch.setenv(GUARD, value)

    executor, futures, ran_on = _load_one(_submit_as_deepseek_imports_it(), use_async=True)

    assert executor.submitted == 0
    assert futures == []
    assert ran_on == [threading.main_thread()]


@pytest.mark.guard_off
def test_guard_explicitly_off_keeps_the_pool(monkeypatch):
    # The recipe's .env writes the guard off as "0": stock behaviour, patched or not.
    monkeypatch.setenv(GUARD, "0")

    executor, _, _ = _load_one(_submit_as_deepseek_imports_it(), use_async=True)

    assert executor.submitted == 1


@pytest.mark.absent
def test_absent_guard_undeclared_and_pool_used(monkeypatch):
    from sglang.srt import environ

    assert GUARD not in vars(environ.Envs)
    monkeypatch.setenv(GUARD, "1")

    executor, _, _ = _load_one(_submit_as_deepseek_imports_it(), use_async=True)

    assert executor.submitted == 1
