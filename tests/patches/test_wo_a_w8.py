"""wo_a_w8: V4.1's wo_a kept 8-bit (e4m3 + 32x32 block scales) instead of bf16.

The attention modules are real (DSparkAttention, a MqaAttentionBase, built on
CPU with a tiny config and the parallel widths stated through sglang's own
override). The attention kernel, KV pool and MQALayer's full forward need a
GPU; what runs here is every path that reads wo_a once the weights loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

FEATURE = "wo_a_w8"

# On a GPU sglang takes its CUDA paths, which the CPU stand-ins below do not replace: those
# tests skip there (a mark, so the report names the reason once, at collection).
CPU_FORWARD_ONLY = pytest.mark.skipif(os.environ.get("FORKBUILD_TEST_DEVICE", "cpu") == "cuda",
                                      reason="the CPU forward: on a GPU sglang takes its CUDA attention paths, which these stand-ins do not replace; test_gpu_wo_a_w8 covers the W8 GEMM on the GPU")

# The Triton interpreter checks the kernel's logic on CPU; on a GPU the compiled kernel itself
# runs (test_gpu_wo_a_w8), and the lent H200's Triton 3.6 interpreter cannot take a range
# bounded by a program id (TypeError in its __index__), so there these skip.
CPU_INTERPRETER_ONLY = pytest.mark.skipif(os.environ.get("FORKBUILD_TEST_DEVICE", "cpu") == "cuda",
                                          reason="Triton interpreter: on a GPU the compiled kernel runs (test_gpu_wo_a_w8)")

# Triton picks its interpreter (TRITON_INTERPRET=1) when a kernel module is imported: the
# interpreter checks below run in a process of their own. One process runs them all, the
# asking test's check first (each start imports sglang: seconds of CPU).
_INTERPRETER_SCRIPT = textwrap.dedent(
    """
    import json, sys, traceback
    sys.path.insert(0, sys.argv[1])
    import test_wo_a_w8

    outcomes = {}
    for check in json.loads(sys.argv[2]):
        try:
            getattr(test_wo_a_w8, check)()
            outcomes[check] = "ok"
        except BaseException:
            outcomes[check] = traceback.format_exc()[-3000:]
    print(json.dumps(outcomes))
    """
)
_INTERPRETED = ("_one_pass_dequantisation_is_torchs",) if os.environ.get("FORKBUILD_TEST_DEVICE", "cpu") == "cuda" \
    else ("_w8_kernel_matches_the_reference", "_split_k_kernel_matches_the_reference", "_one_pass_dequantisation_is_torchs")
_interpreted: dict[tuple[str, str], str] = {}


def _in_the_interpreter(check: str) -> None:
    """Runs `check` (a function of this module) in Triton's interpreter, under the DSV41_WO_A_W8
    the test set."""
    guard = os.environ.get("DSV41_WO_A_W8", "")
    if (guard, check) not in _interpreted:
        checks = [check, *(other for other in _INTERPRETED if other != check)]
        done = subprocess.run(
            [sys.executable, "-c", _INTERPRETER_SCRIPT, str(Path(__file__).parent), json.dumps(checks)],
            env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=900,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        for name, outcome in json.loads(done.stdout.strip().splitlines()[-1]).items():
            _interpreted[guard, name] = outcome
    assert _interpreted[guard, check] == "ok", _interpreted[guard, check]


GROUPS, RANK, HEADS, HEAD_DIM = 2, 32, 4, 64
IN_DIM = HEADS * HEAD_DIM // GROUPS  # 128


def _config(num_layers: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        model_type="deepseek_v41", hidden_size=64, qk_rope_head_dim=16, head_dim=HEAD_DIM,
        num_attention_heads=HEADS, o_groups=GROUPS, q_lora_rank=32, o_lora_rank=RANK,
        rms_norm_eps=1e-6, q_head_norm=False, compress_ratios=[0] * num_layers,
        num_key_value_heads=1, num_hidden_layers=num_layers, max_position_embeddings=128,
        compress_rope_theta=10000.0, rope_theta=10000.0, rope_scaling=None,
        sliding_window=8, window_size=8,
    )  # fmt: skip


def _attention(layer_id: int = 0, num_layers: int = 1):
    from sglang.srt.models.deepseek_v4_dspark import DSparkAttention
    from sglang.srt.runtime_context import get_parallel

    with get_parallel().override(attn_tp_rank=0, attn_tp_size=1, tp_size=1, tp_rank=0):
        return DSparkAttention(_config(num_layers), layer_id, None, f"layers.{layer_id}")


def _checkpoint_like_weight(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    """A bf16 wo_a as stock loads V4.1's: e4m3 codes times e8m0 (power-of-two)
    32x32 block scales, dequantised."""
    gen = torch.Generator().manual_seed(seed)
    codes = (torch.randn(rows, cols, generator=gen) * 100).to(torch.float8_e4m3fn)
    exponents = torch.randint(-12, -4, (rows // 32, cols // 32), generator=gen)
    scale = torch.ldexp(torch.ones(rows // 32, cols // 32), exponents)
    scale = scale.repeat_interleave(32, 0).repeat_interleave(32, 1)
    return (codes.float() * scale).to(torch.bfloat16)


def _reference(o: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    wo_a = weight.view(o.shape[1], -1, o.shape[2])
    return torch.einsum("tgd,grd->tgr", o.float(), wo_a.float()).to(torch.bfloat16)


def _loaded(attn, weight: torch.Tensor):
    attn.wo_a.weight.data.copy_(weight)
    return attn


def _w8_attention(monkeypatch, weight: torch.Tensor, env: str, value: str | None):
    """An attention built with `env` set to `value` (None: unset, so series.toml's
    default), `weight` loaded into its wo_a, converted to W8 as post-load does."""
    from sglang.srt.models.deepseek_v4_wo_a_w8 import convert_wo_a_to_w8

    if value is None:
        monkeypatch.delenv(env, raising=False)
    else:
        monkeypatch.setenv(env, value)
    attn = _loaded(_attention(), weight)
    convert_wo_a_to_w8(attn)
    return attn


@pytest.mark.guard_off
def test_guard_off_layers_keep_the_bf16_wo_a():
    attn = _attention()
    assert getattr(attn, "wo_a_w8", False) is False
    assert attn.wo_a.weight.dtype == torch.bfloat16
    assert attn.wo_a.weight.shape == (GROUPS * RANK, IN_DIM)
    assert not hasattr(attn.wo_a, "weight_w8")


@pytest.mark.absent
def test_absent_declares_no_guard_and_no_w8_path():
    from sglang.srt.environ import Envs
    from sglang.srt.models.deepseek_v4 import MqaAttentionBase

    for name in ("DSV41_WO_A_W8", "DSV41_WO_A_W8_MID", "DSV41_WO_A_W8_DROP"):
        assert name not in vars(Envs)
    assert not hasattr(MqaAttentionBase, "_apply_wo_a_w8")


@pytest.mark.guard_on
def test_round_trip_is_exact_for_checkpoint_weights_and_bounded_otherwise(monkeypatch):
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    from sglang.kernels.ops.gemm.dsv4_wo_a_w8 import dequantize_wo_a_w8, quantize_wo_a_w8
    from sglang.srt.models.deepseek_v4_wo_a_w8 import convert_wo_a_to_w8

    # Through the post-load conversion the guard switches on: what it stores
    # is exactly the checkpoint's weight.
    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM)
    weight[:32] = 0  # a padded shard's rows
    attn = _loaded(_attention(), weight)
    convert_wo_a_to_w8(attn)
    codes, scale = attn.wo_a.weight_w8, attn.wo_a.weight_w8_scale
    assert codes.dtype == torch.float8_e4m3fn and scale.shape == (GROUPS * RANK // 32, IN_DIM // 32)
    assert torch.equal(dequantize_wo_a_w8(codes, scale), weight)

    arbitrary = torch.randn(64, 128, generator=torch.Generator().manual_seed(1)).bfloat16()
    back = dequantize_wo_a_w8(*quantize_wo_a_w8(arbitrary)).float()
    # e4m3 keeps 3 mantissa bits: relative error <= 2**-4 for normal codes;
    # codes below the normal range (2**-6 * scale) are off by < 2**-10 * scale.
    block_scale = quantize_wo_a_w8(arbitrary)[1].repeat_interleave(32, 0).repeat_interleave(32, 1)
    error = (back - arbitrary.float()).abs()
    assert torch.all(error <= arbitrary.float().abs() * 2**-4 + block_scale * 2**-10)


@pytest.mark.guard_on
def test_w8_matmul_matches_the_bf16_reference(monkeypatch):
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    from sglang.srt.models.deepseek_v4_wo_a_w8 import convert_wo_a_to_w8

    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM)
    attn = _loaded(_attention(), weight)
    convert_wo_a_to_w8(attn)
    o = torch.randn(5, GROUPS, IN_DIM, generator=torch.Generator().manual_seed(2)).bfloat16()
    # Same operands as the reference (the round trip is exact), so only the
    # summation order differs: within two bf16 ulps of the result (rtol 2**-6).
    torch.testing.assert_close(attn._apply_wo_a_w8(o), _reference(o, weight), rtol=2**-6, atol=1e-3)
    assert attn._apply_wo_a_w8(o[:0]).shape == (0, GROUPS, RANK)


@pytest.mark.guard_on
@CPU_INTERPRETER_ONLY
def test_w8_triton_kernel_matches_the_reference_in_the_interpreter(monkeypatch):
    # The CUDA path is a Triton kernel; TRITON_INTERPRET=1 runs it on CPU tensors, with the
    # guard on and the codes from the post-load conversion.
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    _in_the_interpreter("_w8_kernel_matches_the_reference")


def _w8_kernel_matches_the_reference():
    from sglang.kernels.ops.gemm.dsv4_wo_a_w8 import _wo_a_w8_triton, quantize_wo_a_w8
    from sglang.srt.models.deepseek_v4_wo_a_w8 import convert_wo_a_to_w8

    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM, seed=3)
    attn = _loaded(_attention(), weight)
    convert_wo_a_to_w8(attn)
    codes, scale = attn.wo_a.weight_w8, attn.wo_a.weight_w8_scale
    gen = torch.Generator().manual_seed(3)
    o = torch.randn(19, GROUPS, IN_DIM, generator=gen).bfloat16()
    torch.testing.assert_close(_wo_a_w8_triton(o, codes, scale), _reference(o, weight), rtol=2**-6, atol=1e-3)
    # A strided o (a view, as a forward may hand it over): the kernel's
    # indexing assumes a contiguous one.
    strided = torch.randn(GROUPS, 7, IN_DIM, generator=gen).bfloat16().transpose(0, 1)
    assert not strided.is_contiguous()
    out = _wo_a_w8_triton(strided, codes, scale)
    torch.testing.assert_close(out, _reference(strided, weight), rtol=2**-6, atol=1e-3)
    # A reduction dim of three 32-column blocks: no K tile of 64 or 128 divides it.
    narrow = _checkpoint_like_weight(GROUPS * RANK, 96, seed=4)
    o96 = torch.randn(5, GROUPS, 96, generator=gen).bfloat16()
    out = _wo_a_w8_triton(o96, *quantize_wo_a_w8(narrow))
    torch.testing.assert_close(out, _reference(o96, narrow), rtol=2**-6, atol=1e-3)


@pytest.mark.guard_on
def test_split_k_where_the_reduction_is_long_and_the_weight_gives_few_programs(monkeypatch):
    # DeepSeek-V4.1-Flash's own wo_a per rank at TP4 ([2, 1024, 4096]): the table's
    # 32/64-row tiles cut it into 32-64 weight slices of 32 k-steps, 1.6x cuBLAS at
    # decode and 1.9-2.1x at 128-256 tokens on an H200. Split over the programs
    # that make a wave with the token tiles: to 32 tokens token-left 64-row,
    # 256-wide tiles (the decode sweep's best), above it weight-left 64-row,
    # 128-wide tiles with token tiles of up to 128 (the prefill sweep's best).
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    from sglang.kernels.ops.gemm.dsv4_wo_a_w8 import _split_k, _tiles

    def plan(tokens, groups, rows, dim):
        return _split_k(tokens, groups, rows, dim, _tiles(tokens, groups, rows, dim))

    assert plan(1, 2, 1024, 4096) == ((16, 64, 256, 4, 3, False), 4)
    assert plan(16, 2, 1024, 4096) == ((16, 64, 256, 4, 3, False), 4)
    assert plan(17, 2, 1024, 4096) == ((32, 64, 256, 4, 3, False), 4)
    assert plan(32, 2, 1024, 4096) == ((32, 64, 256, 4, 3, False), 4)
    assert plan(33, 2, 1024, 4096) == ((64, 64, 128, 4, 4, True), 4)
    assert plan(64, 2, 1024, 4096) == ((64, 64, 128, 4, 4, True), 4)
    assert plan(65, 2, 1024, 4096) == ((128, 64, 128, 4, 4, True), 4)
    assert plan(128, 2, 1024, 4096) == ((128, 64, 128, 4, 4, True), 4)
    assert plan(129, 2, 1024, 4096) == ((128, 64, 128, 4, 4, True), 2)  # two token tiles: half the splits
    assert plan(256, 2, 1024, 4096) == ((128, 64, 128, 4, 4, True), 2)
    assert plan(257, 2, 1024, 4096) == (_tiles(257, 2, 1024, 4096), 1)  # past the measured token counts
    assert plan(1, 3, 1024, 4096) == ((16, 64, 256, 4, 3, False), 4)  # 48 x 4: the fewest splits that make 128
    assert plan(200, 3, 1024, 4096) == ((128, 64, 128, 4, 4, True), 2)  # 48 x 2 token tiles x 2
    assert plan(1, 4, 1024, 4096) == (_tiles(1, 4, 1024, 4096), 1)  # 128 programs of 32 rows: enough (TP2)
    assert plan(1, 1, 64, 2048) == ((16, 64, 256, 4, 3, False), 8)  # at most 8, and whole k-steps each
    assert plan(100, 1, 64, 2048) == ((128, 64, 128, 4, 4, True), 8)
    assert plan(1, 1, 64, 1024 + 512)[1] == 1  # 12 k-steps of 128: too short to split
    # No split of whole 256-wide steps divides 17 of them: the table's tiles, not
    # the split form's tiles run unsplit.
    assert plan(1, 1, 64, 256 * 17) == (_tiles(1, 1, 64, 256 * 17), 1)
    for shape in ((8, 256, 512), (16, 1024, 1024), (8, 1024, 4096)):  # short, or 256 programs already
        assert plan(1, *shape) == (_tiles(1, *shape), 1)
        assert plan(128, *shape) == (_tiles(128, *shape), 1)


@pytest.mark.guard_on
@CPU_INTERPRETER_ONLY
def test_split_k_kernel_matches_the_reference_in_the_interpreter(monkeypatch):
    # The split-K form through the real dispatch (_wo_a_w8_triton picks it for a
    # long, narrow weight): float32 partials added in a fixed order, so the same
    # call gives the same bits; the unsplit kernel agrees within bf16 rounding.
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    _in_the_interpreter("_split_k_kernel_matches_the_reference")


def _split_k_kernel_matches_the_reference():
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8 as w8

    weight = _checkpoint_like_weight(2 * 64, 2048, seed=7)
    codes, scale = w8.quantize_wo_a_w8(weight)
    gen = torch.Generator().manual_seed(7)
    launched = []
    real = w8._sum_splits_kernel

    class Recorder:
        def __getitem__(self, grid):
            return lambda *a, **k: launched.append(k["SPLIT"]) or real[grid](*a, **k)

    w8._sum_splits_kernel = Recorder()
    try:
        for tokens in (1, 5, 40, 130):  # 40, 130: weight-left, one and two token tiles
            o = torch.randn(tokens, 2, 2048, generator=gen).bfloat16()
            split = w8._wo_a_w8_triton(o, codes, scale)
            torch.testing.assert_close(split, _reference(o, weight), rtol=2**-6, atol=1e-3)
            assert torch.equal(split, w8._wo_a_w8_triton(o, codes, scale))
            unsplit = w8._wo_a_w8_triton(o, codes, scale, w8._tiles(tokens, 2, 64, 2048))
            torch.testing.assert_close(split, unsplit, rtol=2**-7, atol=1e-3)
    finally:
        w8._sum_splits_kernel = real
    assert launched == [8] * 8, launched
    # Three 32-row blocks a group: the split form's 64-row tile narrows to 32
    # (a 64-row grid would leave the last 32 rows unwritten).
    assert w8._split_k(1, 1, 96, 2048, w8._tiles(1, 1, 96, 2048)) == ((16, 32, 256, 4, 3, False), 8)
    weight96 = _checkpoint_like_weight(96, 2048, seed=8)
    o = torch.randn(3, 1, 2048, generator=gen).bfloat16()
    out = w8._wo_a_w8_triton(o, *w8.quantize_wo_a_w8(weight96))
    torch.testing.assert_close(out, _reference(o, weight96), rtol=2**-6, atol=1e-3)
    # Explicit tiles whose split does not divide the reduction are refused
    # before launch (16 x 256 > 2048: the kernel would skip columns).
    with pytest.raises(AssertionError, match="split 16 x 256 does not divide 2048"):
        w8._wo_a_w8_triton(o, *w8.quantize_wo_a_w8(weight96), (16, 32, 256, 4, 3, False), 16)


@pytest.mark.guard_on
def test_w8_prefill_dispatch_follows_the_dequant_tokens_guard(monkeypatch):
    # Through the real call site: the attention reads DSV41_WO_A_W8_DEQUANT_TOKENS
    # at build, and from that many tokens on its W8 GEMM dequantises + runs the
    # bf16 GEMM; below it (and with 0: never) the W8 path of the device runs.
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8

    taken = []
    for name in ("_wo_a_w8_dequantized", "_wo_a_w8_torch"):
        real = getattr(dsv4_wo_a_w8, name)
        monkeypatch.setattr(dsv4_wo_a_w8, name, lambda *a, _n=name, _r=real: taken.append(_n) or _r(*a))
    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM, seed=6)
    o = torch.randn(9, GROUPS, IN_DIM, generator=torch.Generator().manual_seed(6)).bfloat16()

    def paths(threshold: str | None, tokens: int) -> list:
        attn = _w8_attention(monkeypatch, weight, "DSV41_WO_A_W8_DEQUANT_TOKENS", threshold)
        taken.clear()
        out = attn._apply_wo_a_w8(o[:tokens])
        torch.testing.assert_close(out, _reference(o[:tokens], weight), rtol=2**-6, atol=1e-3)
        return list(taken)

    assert paths("4", 4) == ["_wo_a_w8_dequantized"]
    assert paths("4", 9) == ["_wo_a_w8_dequantized"]
    assert paths("4", 3) == ["_wo_a_w8_torch"]
    assert paths("0", 9) == ["_wo_a_w8_torch"]  # 0: never dequantise
    assert paths(None, 9) == ["_wo_a_w8_torch"]
    # The default, from series.toml through the generated guards: where the
    # split-K kernel (to 256 tokens) ends.
    assert _attention().wo_a_w8_dequant_tokens == 257
    monkeypatch.setenv("DSV41_WO_A_W8_DEQUANT_TOKENS", "-1")
    with pytest.raises(ValueError, match="DSV41_WO_A_W8_DEQUANT_TOKENS must be >= 0"):
        _attention()


@pytest.mark.guard_on
def test_one_pass_dequantisation_is_torchs_bit_for_bit_in_the_interpreter(monkeypatch):
    # The prefill path's Triton dequantisation (TRITON_INTERPRET=1 runs it on
    # CPU tensors): every e4m3 code, zeros and subnormals included, times
    # power-of-two scales gives exactly torch's bf16; and the dispatch through
    # it matches the bf16 reference.
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    _in_the_interpreter("_one_pass_dequantisation_is_torchs")


def _one_pass_dequantisation_is_torchs():
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8 as w8

    codes = torch.arange(256, dtype=torch.uint8).repeat(32 * 96 // 256 * 2).view(64, 96)
    codes = codes.view(torch.float8_e4m3fn)
    codes = torch.where(codes.float().isnan(), 0.0, codes.float()).to(torch.float8_e4m3fn)
    scale = torch.ldexp(torch.ones(2, 3), torch.tensor([[-20, -7, 0], [-1, -12, 3]]))
    fast = w8.dequantize_wo_a_w8_triton(codes, scale)
    assert fast.dtype == torch.bfloat16 and torch.equal(fast, w8.dequantize_wo_a_w8(codes, scale))
    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM, seed=7)
    codes, scale = w8.quantize_wo_a_w8(weight)
    o = torch.randn(11, GROUPS, IN_DIM, generator=torch.Generator().manual_seed(7)).bfloat16()
    calls = []
    real = w8.dequantize_wo_a_w8_triton
    w8.dequantize_wo_a_w8_triton = lambda *a: calls.append(1) or real(*a)
    try:
        out = w8.wo_a_w8_matmul(o, codes, scale, dequant_tokens=11)
    finally:
        w8.dequantize_wo_a_w8_triton = real
    assert calls == [1], calls
    torch.testing.assert_close(out, _reference(o, weight), rtol=2**-6, atol=1e-3)


@pytest.mark.guard_on
def test_a_wo_a_not_in_whole_32x32_blocks_is_refused_naming_its_shape(monkeypatch):
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    from sglang.srt.models.deepseek_v4_dspark import DSparkAttention
    from sglang.srt.models.deepseek_v4_wo_a_w8 import convert_wo_a_to_w8
    from sglang.srt.runtime_context import get_parallel

    config = _config()
    config.o_lora_rank = 40  # wo_a [2 x 40, 128]: 80 rows are no whole number of 32-row blocks
    with get_parallel().override(attn_tp_rank=0, attn_tp_size=1, tp_size=1, tp_rank=0):
        attn = DSparkAttention(config, 0, None, "layers.0")
    assert attn.wo_a_w8
    with pytest.raises(ValueError, match=r"divisible by 32, got \(80, 128\)"):
        convert_wo_a_to_w8(attn)


@pytest.mark.guard_on
def test_block_scale_at_a_power_of_two_boundary_keeps_the_round_trip_exact(monkeypatch):
    """A block whose largest weight is exactly 448 (e4m3's max) times a power of
    two: its scale is that power of two, not twice it, or the block's smallest
    codes would fall into e4m3's subnormals and round."""
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    from sglang.kernels.ops.gemm.dsv4_wo_a_w8 import dequantize_wo_a_w8
    from sglang.srt.models.deepseek_v4_wo_a_w8 import convert_wo_a_to_w8

    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM, seed=12).float()
    weight[:32, :32] = 2.0**-8 * 1.125 * 2**-6  # e4m3's smallest normal mantissa step, at scale 2**-8
    weight[0, 0] = 448 * 2.0**-8
    weight = weight.to(torch.bfloat16)
    attn = _loaded(_attention(), weight)
    convert_wo_a_to_w8(attn)

    assert attn.wo_a.weight_w8_scale[0, 0] == 2.0**-8
    assert torch.equal(dequantize_wo_a_w8(attn.wo_a.weight_w8, attn.wo_a.weight_w8_scale), weight)


@pytest.mark.guard_on
def test_w8_matmul_refuses_codes_that_do_not_fit_its_input(monkeypatch):
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    from sglang.kernels.ops.gemm.dsv4_wo_a_w8 import wo_a_w8_matmul
    from sglang.srt.models.deepseek_v4_wo_a_w8 import convert_wo_a_to_w8

    attn = _loaded(_attention(), _checkpoint_like_weight(GROUPS * RANK, IN_DIM))
    convert_wo_a_to_w8(attn)
    codes, scale = attn.wo_a.weight_w8, attn.wo_a.weight_w8_scale
    o = torch.randn(3, GROUPS, IN_DIM).bfloat16()
    with pytest.raises(AssertionError):
        wo_a_w8_matmul(o, codes.to(torch.bfloat16), scale)  # not e4m3 codes
    with pytest.raises(AssertionError):
        wo_a_w8_matmul(o[..., :64], codes, scale)  # o's dim is not the weight's
    with pytest.raises(AssertionError):
        wo_a_w8_matmul(torch.randn(3, 3, IN_DIM).bfloat16(), codes, scale)  # 64 rows are no 3 groups of 32k


@pytest.mark.guard_on
def test_drop_frees_bf16_and_every_reader_uses_the_w8_copy(monkeypatch):
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    monkeypatch.setenv("DSV41_WO_A_W8_DROP", "1")
    from sglang.srt.layers.cp import cp_decode_attn_tp
    from sglang.srt.models.deepseek_v4_dspark import DeepseekV4ForCausalLMDSpark

    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM)
    attn = _loaded(_attention(), weight)
    assert attn.wo_a_w8

    # The draft model's post-load hook converts, as the target's does.
    draft = nn.Module()
    draft.stages = nn.ModuleList()
    draft.attn = attn
    DeepseekV4ForCausalLMDSpark.post_load_weights(draft)
    assert "weight" not in dict(attn.wo_a.named_parameters())
    assert getattr(attn.wo_a, "weight", None) is None
    assert attn.wo_a.weight_w8.dtype == torch.float8_e4m3fn

    o = torch.randn(3, GROUPS, IN_DIM, generator=torch.Generator().manual_seed(4)).bfloat16()
    torch.testing.assert_close(attn._apply_wo_a_w8(o), _reference(o, weight), rtol=2**-6, atol=1e-3)

    # CP decode attention TP slices wo_a by rows per rank: the 8-bit copy
    # must be sliced instead of the (gone) bf16 weight.
    ctx = cp_decode_attn_tp.CpDecodeAttnTpContext.__new__(cp_decode_attn_tp.CpDecodeAttnTpContext)
    ctx.decode_tp_rank, ctx.decode_tp_size = 1, 2
    ctx.use_decode_attn_tp, ctx._slice_cache = False, {}
    monkeypatch.setattr(cp_decode_attn_tp, "_global_cp_decode_attn_tp_ctx", ctx)
    monkeypatch.setattr(cp_decode_attn_tp, "is_cp_active", lambda batch: False)
    monkeypatch.setattr(cp_decode_attn_tp, "dsa_use_prefill_cp", lambda batch: False)
    with attn.maybe_use_decode_attn_tp(SimpleNamespace()):
        assert attn.n_local_groups == 1
        local = attn._apply_wo_a_w8(o[:, 1:])
        torch.testing.assert_close(local, _reference(o[:, 1:], weight[RANK:]), rtol=2**-6, atol=1e-3)
    assert attn.wo_a.weight_w8.shape == (GROUPS * RANK, IN_DIM)

    DeepseekV4ForCausalLMDSpark.post_load_weights(draft)  # a second pass is a no-op
    assert getattr(attn.wo_a, "weight", None) is None


@pytest.mark.guard_on
def test_mid_keeps_first_and_last_layer_in_bf16(monkeypatch):
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    monkeypatch.setenv("DSV41_WO_A_W8_MID", "1")
    selected = [_attention(layer_id, num_layers=4).wo_a_w8 for layer_id in range(4)]
    assert selected == [False, True, True, False]
    monkeypatch.delenv("DSV41_WO_A_W8_MID")
    assert [_attention(layer_id, num_layers=4).wo_a_w8 for layer_id in range(4)] == [True] * 4


@pytest.mark.guard_on
@pytest.mark.parametrize(
    "refinements",
    [("DSV41_WO_A_W8_DROP",), ("DSV41_WO_A_W8_MID",), ("DSV41_WO_A_W8_MID", "DSV41_WO_A_W8_DROP")],
)
def test_refinements_without_w8_are_rejected_at_startup(monkeypatch, refinements):
    for name in refinements:
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("DSV41_WO_A_W8", "0")
    with pytest.raises(ValueError) as excinfo:
        _attention()
    message = str(excinfo.value)
    assert all(name in message for name in refinements) and "DSV41_WO_A_W8=1" in message


@pytest.mark.guard_on
def test_the_target_models_post_load_converts_wo_a(monkeypatch):
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    monkeypatch.setenv("DSV41_WO_A_W8_DROP", "1")
    from sglang.srt.models.deepseek_v4 import DeepseekV4ForCausalLM

    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM)
    attn = _loaded(_attention(), weight)
    # The target's post-load hook (run by the model loader after the weights
    # are in), on a model holding one attention layer: an MTP (nextn) model
    # returns right after the conversion.
    target = nn.Module()
    target.wo_a_fp8 = False
    target.attn = attn
    DeepseekV4ForCausalLM.post_load_weights(target, is_nextn=True)
    assert getattr(attn.wo_a, "weight", None) is None
    assert attn.wo_a.weight_w8.dtype == torch.float8_e4m3fn
    o = torch.randn(2, GROUPS, IN_DIM, generator=torch.Generator().manual_seed(5)).bfloat16()
    torch.testing.assert_close(attn._apply_wo_a_w8(o), _reference(o, weight), rtol=2**-6, atol=1e-3)


# -- through the attention forwards ---------------------------------------------
#
# MQALayer (the target's attention) and DSparkAttention are built through their
# constructors on one CPU rank and their forward runs; what needs a GPU is
# replaced, outside the patched lines only:
# - the attention backend (a CUDA attention kernel over the KV pool) returns a
#   fixed attention output, the o that the wo_a GEMM then reads;
# - MQALayer._forward_prepare (q/kv projections through fused CUDA JIT
#   norm+RoPE kernels and the KV-cache store) returns zero q/kv: the backend
#   stand-in does not read them;
# - MQALayer's inverse RoPE on o (a CUDA JIT kernel) runs as sglang's torch
#   rotary (deepseek_v4_dspark.apply_rotary_emb), DSpark's own CPU path;
# - the rotary-embedding factory (on a plain CPU torch it imports vllm's kernel;
#   only the compressor and indexer, absent at compress ratio 0, read it);
# - DSpark's KV pool (its store of the block's K) records nothing.
# wo_a's W8 branch, the bf16 branches and wo_b run for real.

MQA_TOKENS = 6
_RANKS = ("tp_rank", "pp_rank", "moe_ep_rank", "moe_dp_rank", "moe_tp_rank", "attn_tp_rank", "attn_cp_rank",
          "dcp_rank", "attn_dcp_rank", "attn_dp_rank", "dp_rank")
_GROUPS = ("world_group", "tp_group", "pp_group", "moe_ep_group", "moe_dp_group", "moe_tp_group", "attn_tp_group",
           "attn_cp_group", "shared_experts_tp_group", "dcp_group")


def _v41_config(num_layers: int = 1, *, heads: int = HEADS, head_dim: int = HEAD_DIM, groups: int = GROUPS,
                rank: int = RANK):
    from sglang.srt.configs.deepseek_v4 import DeepSeekV4Config

    config = DeepSeekV4Config(
        architectures=["DeepseekV4ForCausalLM"], model_type="deepseek_v41", quantization_config=None,
        rope_scaling={}, kv_source_layer_ids=[], index_source_layer_ids=[], engram_layer_ids=[],
        engram_num_embeddings=[], num_hidden_layers=num_layers, compress_ratios=[0] * num_layers, hidden_size=64,
        num_attention_heads=heads, qk_rope_head_dim=16, q_lora_rank=32, o_lora_rank=rank, o_groups=groups,
        max_position_embeddings=128, window_size=8,
    )  # fmt: skip
    config.head_dim = head_dim  # a checkpoint's config.json field the dataclass does not declare
    return config


@pytest.fixture
def one_cpu_rank(monkeypatch):
    """sglang's runtime context as a one-rank CPU server publishes it."""
    import contextlib

    from sglang.srt.models import deepseek_v4
    from sglang.srt.runtime_context import get_context, get_parallel

    monkeypatch.setattr(deepseek_v4, "get_rope_wrapper", lambda *args, **kwargs: None)
    with contextlib.ExitStack() as scope:
        scope.enter_context(get_context().override_server_args(device="cpu"))
        scope.enter_context(get_parallel().override(
            tp_size=1, attn_tp_size=1, attn_dp_size=1, attn_cp_size=1, pp_size=1, moe_ep_size=1, moe_tp_size=1,
            **dict.fromkeys(_RANKS, 0), **dict.fromkeys(_GROUPS, _one_rank_group())))
        yield


def _one_rank_group():
    return SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1, rank_in_group=0, rank=0)


def _rope_in_torch(x, y, freqs_cis, *, positions, inverse=False):
    """sglang's torch rotary (DSpark's CPU path) for the fused RoPE CUDA JIT kernel."""
    from sglang.srt.models.deepseek_v4_dspark import apply_rotary_emb

    apply_rotary_emb(x, freqs_cis[positions], inverse=inverse)


def _mqa_layer(layer_id: int = 0, num_layers: int = 1, **shape):
    from sglang.srt.model_loader.utils import set_default_torch_dtype
    from sglang.srt.models.deepseek_v4 import MQALayer

    with set_default_torch_dtype(torch.bfloat16):
        return MQALayer(_v41_config(num_layers, **shape), layer_id, None, f"layers.{layer_id}")


def _seeded(attn, wo_a: torch.Tensor, seed: int = 0):
    """Load the layer as the model loader would: wo_a as stock dequantises
    V4.1's checkpoint, wo_b random."""
    gen = torch.Generator().manual_seed(seed)
    attn.wo_a.weight.data.copy_(wo_a)
    attn.wo_b.weight.data.copy_((torch.randn(attn.wo_b.weight.shape, generator=gen) * 0.05).to(torch.bfloat16))
    return attn


class _AttentionBackend:
    """Stands in for the CUDA attention backend: returns a fixed o [T, heads, head_dim]."""

    def __init__(self, out: torch.Tensor):
        self.out = out
        self.token_to_kv_pool = SimpleNamespace(uniform_fp8=False)
        self.calls = 0

    def forward(self, q, k, v, layer, forward_batch, **_):
        self.calls += 1
        return self.out[:, : q.shape[1]].clone()

    def get_swa_out_cache_loc(self, forward_batch):
        return forward_batch.out_cache_loc


def _decode_batch(tokens: int):
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    return ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=tokens, input_ids=torch.zeros(tokens, dtype=torch.long),
                        req_pool_indices=torch.arange(tokens), seq_lens=torch.full((tokens,), 8),
                        out_cache_loc=torch.arange(tokens) + 1, seq_lens_sum=8 * tokens,
                        positions=torch.arange(tokens) + 2)


def _attention_out(tokens: int, seed: int = 6) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16)


@pytest.fixture
def mqa_forward(monkeypatch):
    """forward(layer) -> MQALayer.forward's output on one decode batch."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
    from sglang.srt.models import deepseek_v4

    def forward_prepare(self, x, positions, forward_batch, attn_backend, q_out=None, **_):
        return x.new_zeros(x.shape[0], self.n_local_heads, self.head_dim), x.new_zeros(x.shape[0], self.head_dim)

    monkeypatch.setattr(deepseek_v4.MQALayer, "_forward_prepare", forward_prepare)
    monkeypatch.setattr(deepseek_v4, "fused_rope_inplace", _rope_in_torch)

    def forward(layer):
        backend = _AttentionBackend(_attention_out(MQA_TOKENS))
        batch = _decode_batch(MQA_TOKENS)
        x = torch.randn(MQA_TOKENS, 64, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16)
        with forward_context(ForwardContext(attn_backend=backend)):
            out = layer(x, batch.positions, batch)
        assert backend.calls == 1
        return out

    return forward


@pytest.mark.guard_off
@CPU_FORWARD_ONLY
def test_mqa_forward_guard_off_runs_the_bf16_wo_a(one_cpu_rank, mqa_forward, monkeypatch):
    from sglang.srt.models import deepseek_v4

    grouped = []
    real = deepseek_v4._apply_wo_a_bf16_matmul
    monkeypatch.setattr(deepseek_v4, "_apply_wo_a_bf16_matmul",
                        lambda o, wo_a, **kwargs: grouped.append(wo_a.dtype) or real(o, wo_a, **kwargs))
    layer = _seeded(_mqa_layer(), _checkpoint_like_weight(GROUPS * RANK, IN_DIM))
    assert not getattr(layer, "wo_a_w8", False)

    out = mqa_forward(layer)

    assert grouped == [torch.bfloat16] and out.shape == (MQA_TOKENS, 64)


@pytest.mark.guard_on
@CPU_FORWARD_ONLY
def test_mqa_forward_takes_the_w8_branch_and_matches_bf16(one_cpu_rank, mqa_forward, monkeypatch):
    from sglang.srt.models.deepseek_v4 import DeepseekV4ForCausalLM

    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM, seed=9)
    expected = mqa_forward(_seeded(_mqa_layer(), weight))
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    monkeypatch.setenv("DSV41_WO_A_W8_DROP", "1")  # a forward that read the bf16 wo_a would fail
    layer = _seeded(_mqa_layer(), weight)
    assert layer.wo_a_w8
    target = nn.Module()
    target.wo_a_fp8, target.layer = False, layer
    DeepseekV4ForCausalLM.post_load_weights(target, is_nextn=True)  # the loader's post-load hook
    assert getattr(layer.wo_a, "weight", None) is None

    out = mqa_forward(layer)

    # The W8 GEMM multiplies the same operands as the bf16 one (the round trip
    # is exact for checkpoint weights); wo_b then rounds both to bf16 again.
    torch.testing.assert_close(out, expected, rtol=2**-6, atol=2e-3)


@pytest.mark.guard_on
@CPU_FORWARD_ONLY
def test_w8_layers_are_not_eligible_for_the_fused_rope_wo_a(one_cpu_rank, monkeypatch):
    """SM10x fuses the inverse RoPE into a bf16 wo_a kernel that reads the bf16
    weight: with W8 a layer must take the W8 branch instead."""
    from sglang.srt.models import deepseek_v4

    fused_shape = dict(heads=16, head_dim=512, groups=2, rank=1024)  # the kernel's one shape: [2 x 1024, 4096]
    monkeypatch.setenv("SGLANG_DSV41_FUSED_WO_A", "1")
    monkeypatch.setattr(deepseek_v4, "_fused_wo_a_arch_supported", lambda: True)  # the SM10x probe
    assert _mqa_layer(**fused_shape).use_fused_wo_a  # stock: eligible

    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    layer = _mqa_layer(**fused_shape)
    assert layer.wo_a_w8 and not layer.use_fused_wo_a


@pytest.fixture
def dspark_forward(monkeypatch):
    """forward(attn) -> DSparkAttention.forward's output on one decode batch."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
    from sglang.srt.models import deepseek_v4_dspark

    stored = []
    pool = SimpleNamespace(uniform_fp8=False,
                           set_swa_key_buffer_radix_fused_norm_rope=lambda **kwargs: stored.append(kwargs["layer_id"]))
    monkeypatch.setattr(deepseek_v4_dspark, "_resolve_dspark_pool", lambda: pool)
    monkeypatch.setattr(deepseek_v4_dspark, "fused_rope_inplace", _rope_in_torch)

    def forward(attn):
        backend = _AttentionBackend(_attention_out(MQA_TOKENS))
        batch = _decode_batch(MQA_TOKENS)
        x = torch.randn(MQA_TOKENS, 64, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16)
        with forward_context(ForwardContext(attn_backend=backend)):
            out = attn(batch.positions, x, batch)
        assert backend.calls == 1 and stored[-1] == attn.layer_id
        return out

    return forward


def _dspark_attention(seed_weight):
    from sglang.srt.model_loader.utils import set_default_torch_dtype

    with set_default_torch_dtype(torch.bfloat16):
        attn = _attention()
    return _seeded(attn, seed_weight)


# DSpark's fast kernels (SGLANG_DSPARK_FAST_KERNEL, the default) and its torch path.
FAST_KERNEL = pytest.mark.parametrize("fast_kernel", ["1", "0"], ids=["fast-kernel", "torch"])


@pytest.mark.guard_off
@FAST_KERNEL
@CPU_FORWARD_ONLY
def test_dspark_forward_guard_off_runs_the_bf16_wo_a(one_cpu_rank, dspark_forward, monkeypatch, fast_kernel):
    monkeypatch.setenv("SGLANG_DSPARK_FAST_KERNEL", fast_kernel)
    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM)
    attn = _dspark_attention(weight)
    assert not getattr(attn, "wo_a_w8", False) and attn._use_fast_kernel == (fast_kernel == "1")

    out = dspark_forward(attn)

    assert out.shape == (MQA_TOKENS, 64) and torch.isfinite(out).all()


@pytest.mark.guard_on
@FAST_KERNEL
@pytest.mark.parametrize("drop", [False, True])
@CPU_FORWARD_ONLY
def test_dspark_forward_takes_the_w8_branch_and_matches_bf16(one_cpu_rank, dspark_forward, monkeypatch, drop,
                                                             fast_kernel):
    monkeypatch.setenv("SGLANG_DSPARK_FAST_KERNEL", fast_kernel)
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8
    from sglang.srt.models import deepseek_v4
    from sglang.srt.models.deepseek_v4_dspark import DeepseekV4ForCausalLMDSpark

    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM, seed=10)
    expected = dspark_forward(_dspark_attention(weight))
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    if drop:
        monkeypatch.setenv("DSV41_WO_A_W8_DROP", "1")
    calls = []
    real = dsv4_wo_a_w8.wo_a_w8_matmul
    monkeypatch.setattr(deepseek_v4, "wo_a_w8_matmul", lambda *args, **kwargs: calls.append(args[1].dtype) or real(*args, **kwargs))
    attn = _dspark_attention(weight)
    draft = nn.Module()
    draft.stages, draft.attn = nn.ModuleList(), attn
    DeepseekV4ForCausalLMDSpark.post_load_weights(draft)

    out = dspark_forward(attn)

    assert calls == [torch.float8_e4m3fn]
    torch.testing.assert_close(out, expected, rtol=2**-6, atol=2e-3)


# bf16_tokens, drop -> the GEMM the forward of MQA_TOKENS (6) tokens runs: stock's own bf16
# GEMM from DSV41_WO_A_W8_BF16_TOKENS tokens on while the bf16 weight is kept; the W8 one below
# it, with 0 (never) and whenever DROP freed the bf16 weight.
BF16_FROM = pytest.mark.parametrize(("bf16_tokens", "drop", "runs"), [
    ("6", False, "bf16"), ("5", False, "bf16"), ("7", False, "w8"), ("0", False, "w8"), ("6", True, "w8"),
])


def _record_wo_a_gemms(monkeypatch) -> list:
    from sglang.srt.models import deepseek_v4

    taken = []
    real_w8, real_bf16 = deepseek_v4.wo_a_w8_matmul, deepseek_v4._apply_wo_a_bf16_matmul
    monkeypatch.setattr(deepseek_v4, "wo_a_w8_matmul", lambda *a, **k: taken.append("w8") or real_w8(*a, **k))
    monkeypatch.setattr(deepseek_v4, "_apply_wo_a_bf16_matmul",
                        lambda *a, **k: taken.append("bf16") or real_bf16(*a, **k))
    return taken


@pytest.mark.guard_on
@BF16_FROM
@CPU_FORWARD_ONLY
def test_mqa_forward_runs_stocks_bf16_gemm_from_bf16_tokens_while_the_weight_is_kept(
        one_cpu_rank, mqa_forward, monkeypatch, bf16_tokens, drop, runs):
    from sglang.srt.models.deepseek_v4 import DeepseekV4ForCausalLM

    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM, seed=11)
    expected = mqa_forward(_seeded(_mqa_layer(), weight))  # stock
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    monkeypatch.setenv("DSV41_WO_A_W8_BF16_TOKENS", bf16_tokens)
    if drop:
        monkeypatch.setenv("DSV41_WO_A_W8_DROP", "1")
    layer = _seeded(_mqa_layer(), weight)
    target = nn.Module()
    target.wo_a_fp8, target.layer = False, layer
    DeepseekV4ForCausalLM.post_load_weights(target, is_nextn=True)
    taken = _record_wo_a_gemms(monkeypatch)

    out = mqa_forward(layer)

    assert taken == [runs]
    if runs == "bf16":
        assert torch.equal(out, expected)  # stock's own GEMM on the kept weight: stock's result
    else:
        torch.testing.assert_close(out, expected, rtol=2**-6, atol=2e-3)


@pytest.mark.guard_on
@FAST_KERNEL
@BF16_FROM
@CPU_FORWARD_ONLY
def test_dspark_forward_runs_stocks_bf16_gemm_from_bf16_tokens_while_the_weight_is_kept(
        one_cpu_rank, dspark_forward, monkeypatch, fast_kernel, bf16_tokens, drop, runs):
    from sglang.srt.models import deepseek_v4_dspark
    from sglang.srt.models.deepseek_v4_dspark import DeepseekV4ForCausalLMDSpark

    monkeypatch.setenv("SGLANG_DSPARK_FAST_KERNEL", fast_kernel)
    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM, seed=12)
    expected = dspark_forward(_dspark_attention(weight))  # stock
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    monkeypatch.setenv("DSV41_WO_A_W8_BF16_TOKENS", bf16_tokens)
    if drop:
        monkeypatch.setenv("DSV41_WO_A_W8_DROP", "1")
    attn = _dspark_attention(weight)
    draft = nn.Module()
    draft.stages, draft.attn = nn.ModuleList(), attn
    DeepseekV4ForCausalLMDSpark.post_load_weights(draft)
    taken = _record_wo_a_gemms(monkeypatch)
    if fast_kernel == "1":  # DSpark's fast path has its own name for stock's bf16 GEMM
        real = deepseek_v4_dspark._apply_wo_a_bf16_matmul
        monkeypatch.setattr(deepseek_v4_dspark, "_apply_wo_a_bf16_matmul",
                            lambda *a, **k: taken.append("bf16") or real(*a, **k))

    out = dspark_forward(attn)

    assert [gemm for gemm in taken if gemm == "w8"] == ([] if runs == "bf16" else ["w8"])
    if fast_kernel == "1":
        assert taken == [runs]
    if runs == "bf16":
        assert torch.equal(out, expected)
    else:
        torch.testing.assert_close(out, expected, rtol=2**-6, atol=2e-3)


@pytest.mark.guard_on
def test_bf16_tokens_defaults_to_decode_sizes_and_refuses_a_negative_value(monkeypatch):
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    # The default, from series.toml through the generated guards: the W8 kernel up to 32
    # tokens (decode and verify), where it beats cuBLAS on the model's own wo_a too.
    assert _attention().wo_a_w8_bf16_tokens == 33
    monkeypatch.setenv("DSV41_WO_A_W8_BF16_TOKENS", "-1")
    with pytest.raises(ValueError, match="DSV41_WO_A_W8_BF16_TOKENS must be >= 0"):
        _attention()
