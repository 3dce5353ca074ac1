"""folded_fence: results of the folded accept_and_finalize branch stop aliasing
the verify epilogue's buffers.

On GPU the next static-verify graph replay rewrites those buffers; on CPU the
test rewrites them by hand (what a replay does) and checks what the caller kept.
The race itself needs a GPU and a graph; the aliasing is what the patch changes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

FEATURE = "folded_fence"

BS = 2
FIELDS = ("correct_len", "bonus", "cap_trim_lens", "commit_lens", "new_seq_lens", "out_tokens")


def _executor_and_epilogue():
    """A TargetVerifyExecutor whose folded branch reads a real epilogue. Its
    __init__ inspects the target worker; the folded branch reads only the epilogue."""
    import torch
    from sglang.srt.speculative.dspark_components.dspark_verify import (
        DsparkVerifyEpilogue,
        TargetVerifyExecutor,
    )
    from sglang.srt.speculative.spec_tp_sync import SpecTpSync

    epilogue = DsparkVerifyEpilogue(
        max_bs=4,
        verify_num_draft_tokens=4,
        device="cpu",
        tp_sync=SpecTpSync(SimpleNamespace(world_size=1, rank_in_group=0)),
    )
    # What one replay's in-graph accept leaves in the static buffers.
    for step, name in enumerate(FIELDS, start=1):
        getattr(epilogue, f"{name}_buf").copy_(torch.full_like(getattr(epilogue, f"{name}_buf"), step))
    executor = object.__new__(TargetVerifyExecutor)
    executor.verify_epilogue = epilogue
    return executor, epilogue


def _folded_accept(executor):
    return executor.accept_and_finalize(
        folded_accept=True,
        bs=BS,
        verify_ids_2d=None,
        target_logits=None,
        draft_block=None,
        sampling_info=None,
        draft_input=None,
        layout=None,
        prefix_lens=None,
        draft_tokens=None,
    )


def _replay_rewrites(epilogue) -> None:
    for name in FIELDS:
        getattr(epilogue, f"{name}_buf").fill_(-7)


def _turn_fence_on(monkeypatch) -> None:
    """Turns the guard on and re-reads it into the module's import-time constant."""
    from sglang.srt.environ import envs
    from sglang.srt.speculative.dspark_components import dspark_verify

    monkeypatch.setenv("DSV41_FOLDED_FENCE", "1")
    monkeypatch.setattr(dspark_verify, "_FOLDED_FENCE", envs.DSV41_FOLDED_FENCE.get())


@pytest.mark.guard_off
def test_stock_results_alias_the_epilogue_buffers():
    executor, epilogue = _executor_and_epilogue()
    accept = _folded_accept(executor)
    _replay_rewrites(epilogue)
    for name in FIELDS:
        assert (getattr(accept, name) == -7).all(), name
        assert getattr(accept, name).data_ptr() == getattr(epilogue, f"{name}_buf").data_ptr()


@pytest.mark.guard_on
def test_fenced_results_survive_the_next_replay(monkeypatch):
    _turn_fence_on(monkeypatch)
    executor, epilogue = _executor_and_epilogue()
    accept = _folded_accept(executor)
    _replay_rewrites(epilogue)
    for step, name in enumerate(FIELDS, start=1):
        kept = getattr(accept, name)
        assert kept.shape[0] == BS, name
        assert (kept == step).all(), name
        assert kept.dtype == getattr(epilogue, f"{name}_buf").dtype, name


@pytest.mark.guard_on
def test_bad_value_stops_the_verify_module_at_import_naming_the_variable():
    # The guard is read once, when dspark_verify is imported (startup): a bad
    # value must stop there. A fresh interpreter, because the module is cached here.
    module = "sglang.srt.speculative.dspark_components.dspark_verify"
    env = {**os.environ, "DSV41_FOLDED_FENCE": "sometimes"}
    result = subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "DSV41_FOLDED_FENCE" in result.stderr


@pytest.mark.absent
def test_without_the_feature_results_alias(monkeypatch):
    from sglang.srt.environ import Envs

    monkeypatch.setenv("DSV41_FOLDED_FENCE", "1")
    assert "DSV41_FOLDED_FENCE" not in vars(Envs)
    executor, epilogue = _executor_and_epilogue()
    accept = _folded_accept(executor)
    _replay_rewrites(epilogue)
    assert (accept.bonus == -7).all()
