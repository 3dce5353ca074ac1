"""draft_head_fp8: DSV41_DRAFT_HEAD_FP8 enables the FP8 draft lm-head on CUDA.

sglang 0.5.23 gates its fp8 draft-logits matmul (_fp8_lm_head_matmul, per-row
scales, torch._scaled_mm) to ROCm gfx95. The gate is resolved once at import
of sglang.srt.models.dspark; the tests re-resolve it with the platform probes
(is_cuda, get_device_sm, is_gfx95_supported) mocked, and check the matmul's
accuracy on CPU when the installed torch has an fp8 _scaled_mm there.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

FEATURE = "draft_head_fp8"

# Per-row e4m3 quantisation of both operands: 3 mantissa bits give a relative
# rounding error of at most 2**-4 per element (about 0.036 RMS, measured); the
# product of two such operands stays under 0.06 relative Frobenius error.
FP8_REL_ERROR_BOUND = 0.06


def _cuda_like(monkeypatch, dspark, *, sm: int) -> None:
    monkeypatch.setattr(dspark, "is_cuda", lambda: True)
    monkeypatch.setattr(dspark, "get_device_sm", lambda: sm)
    monkeypatch.setattr(dspark, "is_gfx95_supported", lambda: False)


def _lm_head():
    import torch

    torch.manual_seed(0)
    weight = (torch.randn(512, 256) * 0.05).to(torch.bfloat16)
    return SimpleNamespace(weight=weight, quant_method=None)


def _hidden():
    import torch

    torch.manual_seed(1)
    return torch.randn(8, 256, dtype=torch.bfloat16)


def _fp8_matmul_or_skip(dspark, hidden, lm_head):
    try:
        return dspark._fp8_lm_head_matmul(hidden, lm_head)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch._scaled_mm with float8_e4m3fn is not available on CPU here: {e}")


@pytest.mark.guard_off
def test_bf16_head_matmul_by_default():
    import torch
    from sglang.srt.models import dspark

    assert dspark._DSPARK_FP8_LM_HEAD is False
    hidden, lm_head = _hidden(), _lm_head()
    torch.testing.assert_close(
        dspark.project_through_lm_head(hidden, lm_head), torch.matmul(hidden, lm_head.weight.T)
    )


@pytest.mark.guard_on
@pytest.mark.parametrize("value, sm, expected", [("1", 121, True), ("on", 90, True), ("1", 80, False), ("0", 121, False)])
def test_gate_on_a_cuda_like_platform(monkeypatch, value, sm, expected):
    from sglang.srt.models import dspark

    _cuda_like(monkeypatch, dspark, sm=sm)
    monkeypatch.setenv("DSV41_DRAFT_HEAD_FP8", value)
    assert dspark._resolve_fp8_lm_head() is expected


@pytest.mark.guard_on
def test_gate_stays_off_without_cuda(monkeypatch):
    from sglang.srt.models import dspark

    monkeypatch.setattr(dspark, "is_cuda", lambda: False)
    monkeypatch.setattr(dspark, "is_gfx95_supported", lambda: False)
    monkeypatch.setenv("DSV41_DRAFT_HEAD_FP8", "1")
    assert dspark._resolve_fp8_lm_head() is False


@pytest.mark.guard_on
@pytest.mark.parametrize("cuda, sm", [(False, 0), (True, 80)])
def test_a_set_guard_the_device_cannot_honour_is_warned_about(monkeypatch, caplog, cuda, sm):
    import logging

    from sglang.srt.models import dspark

    _cuda_like(monkeypatch, dspark, sm=sm)
    monkeypatch.setattr(dspark, "is_cuda", lambda: cuda)
    monkeypatch.setenv("DSV41_DRAFT_HEAD_FP8", "1")
    with caplog.at_level(logging.WARNING, logger=dspark.__name__):
        assert dspark._resolve_fp8_lm_head() is False
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "DSV41_DRAFT_HEAD_FP8 is set" in warnings[0] and "SM 8.9+" in warnings[0]
    # Off, or on a device that has it: nothing to warn about.
    caplog.clear()
    monkeypatch.setenv("DSV41_DRAFT_HEAD_FP8", "0")
    assert dspark._resolve_fp8_lm_head() is False
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.guard_on
def test_rocm_gate_unchanged(monkeypatch):
    from sglang.srt.models import dspark

    # With the guard on, ROCm still follows only its own flag.
    monkeypatch.setenv("DSV41_DRAFT_HEAD_FP8", "1")
    monkeypatch.setattr(dspark, "is_cuda", lambda: False)
    monkeypatch.setattr(dspark, "is_gfx95_supported", lambda: True)
    monkeypatch.setenv("SGLANG_ROCM_OPT_DSPARK_FP8_LM_HEAD", "1")
    assert dspark._resolve_fp8_lm_head() is True
    monkeypatch.delenv("SGLANG_ROCM_OPT_DSPARK_FP8_LM_HEAD")
    assert dspark._resolve_fp8_lm_head() is False


@pytest.mark.guard_on
def test_bad_value_fails_naming_the_variable(monkeypatch):
    from sglang.srt.models import dspark

    _cuda_like(monkeypatch, dspark, sm=121)
    monkeypatch.setenv("DSV41_DRAFT_HEAD_FP8", "fp8")
    with pytest.raises(ValueError, match="DSV41_DRAFT_HEAD_FP8"):
        dspark._resolve_fp8_lm_head()


@pytest.mark.guard_on
def test_enabled_head_runs_fp8_within_bound(monkeypatch):
    import torch
    from sglang.srt.models import dspark

    _cuda_like(monkeypatch, dspark, sm=121)
    monkeypatch.setenv("DSV41_DRAFT_HEAD_FP8", "1")
    monkeypatch.setattr(dspark, "_DSPARK_FP8_LM_HEAD", dspark._resolve_fp8_lm_head())
    hidden, lm_head = _hidden(), _lm_head()
    fp8 = _fp8_matmul_or_skip(dspark, hidden, SimpleNamespace(weight=lm_head.weight, quant_method=None))
    logits = dspark.project_through_lm_head(hidden, lm_head)
    # The head took the fp8 path (and cached its quantised weight) ...
    assert lm_head._fp8_weight_cache.dtype == torch.float8_e4m3fn
    torch.testing.assert_close(logits, fp8)
    # ... whose error against the bf16 reference stays within the stated bound.
    reference = hidden.float() @ lm_head.weight.float().T
    rel_error = ((logits.float() - reference).norm() / reference.norm()).item()
    assert rel_error < FP8_REL_ERROR_BOUND


@pytest.mark.absent
def test_without_the_feature_the_guard_is_ignored(monkeypatch):
    from sglang.srt.environ import Envs
    from sglang.srt.models import dspark

    monkeypatch.setenv("DSV41_DRAFT_HEAD_FP8", "1")
    assert "DSV41_DRAFT_HEAD_FP8" not in vars(Envs)
    assert not hasattr(dspark, "_resolve_fp8_lm_head")
    assert dspark._DSPARK_FP8_LM_HEAD is False
