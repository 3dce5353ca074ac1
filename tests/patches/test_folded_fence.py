"""folded_fence: results of the folded accept_and_finalize branch stop aliasing
the verify epilogue's buffers.

On GPU the next static-verify graph replay rewrites those buffers; on CPU the
test rewrites them by hand (what a replay does) and checks what the caller kept.
The race itself needs a GPU and a graph; the aliasing is what the patch changes.
"""

from __future__ import annotations

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
def test_bad_value_stops_the_verify_module_at_import_naming_the_variable(monkeypatch):
    # The guard is read once, when dspark_verify is imported (startup): a bad
    # value must stop there. The module is cached here, so its import runs afresh.
    monkeypatch.setenv("DSV41_FOLDED_FENCE", "sometimes")
    with pytest.raises(ValueError, match="DSV41_FOLDED_FENCE"):
        _import_afresh(monkeypatch, "sglang.srt.speculative.dspark_components.dspark_verify")


def _import_afresh(monkeypatch, name: str):
    """Runs module `name`'s import again in this process, as a fresh interpreter would (in
    milliseconds, not the seconds of a new interpreter importing sglang). The cached module,
    its package's attribute and the invariant registry are restored after the test."""
    import importlib

    from sglang.srt.utils import invariants

    package, _, attribute = name.rpartition(".")
    monkeypatch.setattr(importlib.import_module(package), attribute, importlib.import_module(name))
    monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(invariants, "_REGISTRY", {})  # the module registers its invariants again
    return importlib.import_module(name)


@pytest.mark.absent
def test_without_the_feature_results_alias(monkeypatch):
    from sglang.srt.environ import Envs

    monkeypatch.setenv("DSV41_FOLDED_FENCE", "1")
    assert "DSV41_FOLDED_FENCE" not in vars(Envs)
    executor, epilogue = _executor_and_epilogue()
    accept = _folded_accept(executor)
    _replay_rewrites(epilogue)
    assert (accept.bonus == -7).all()
