"""wo_a_w8: V4.1's wo_a kept 8-bit (e4m3 + 32x32 block scales) instead of bf16.

The attention modules are real (DSparkAttention, a MqaAttentionBase, built on
CPU with a tiny config and the parallel widths stated through sglang's own
override). The attention kernel, KV pool and MQALayer's full forward need a
GPU; what runs here is every path that reads wo_a once the weights loaded.
"""

from __future__ import annotations

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
def test_w8_triton_kernel_matches_the_reference_in_the_interpreter():
    # The CUDA path is a Triton kernel; TRITON_INTERPRET=1 runs it on CPU
    # tensors. The flag must be set before triton is imported: a subprocess,
    # where the guard is on and the codes come from the post-load conversion.
    script = textwrap.dedent(
        """
        import sys, torch
        sys.path.insert(0, %r)
        from test_wo_a_w8 import GROUPS, RANK, IN_DIM, _attention, _checkpoint_like_weight, _loaded, _reference
        from sglang.kernels.ops.gemm.dsv4_wo_a_w8 import _wo_a_w8_triton
        from sglang.srt.models.deepseek_v4_wo_a_w8 import convert_wo_a_to_w8
        weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM, seed=3)
        attn = _loaded(_attention(), weight)
        convert_wo_a_to_w8(attn)
        o = torch.randn(19, GROUPS, IN_DIM, generator=torch.Generator().manual_seed(3)).bfloat16()
        out = _wo_a_w8_triton(o, attn.wo_a.weight_w8, attn.wo_a.weight_w8_scale)
        torch.testing.assert_close(out, _reference(o, weight), rtol=2**-6, atol=1e-3)
        print("ok")
        """
        % str(Path(__file__).parent)
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "DSV41_WO_A_W8": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


@pytest.mark.guard_on
def test_w8_prefill_dispatch_follows_the_dequant_tokens_guard(monkeypatch):
    # Through the real call site: the attention reads DSV41_WO_A_W8_DEQUANT_TOKENS
    # at build, and from that many tokens on its W8 GEMM dequantises + runs the
    # bf16 GEMM; below it (and with 0: never) the W8 path of the device runs.
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8
    from sglang.srt.models.deepseek_v4_wo_a_w8 import convert_wo_a_to_w8

    taken = []
    for name in ("_wo_a_w8_dequantized", "_wo_a_w8_torch"):
        real = getattr(dsv4_wo_a_w8, name)
        monkeypatch.setattr(dsv4_wo_a_w8, name, lambda *a, _n=name, _r=real: taken.append(_n) or _r(*a))
    weight = _checkpoint_like_weight(GROUPS * RANK, IN_DIM, seed=6)
    o = torch.randn(9, GROUPS, IN_DIM, generator=torch.Generator().manual_seed(6)).bfloat16()

    def paths(threshold: str | None, tokens: int) -> list:
        if threshold is None:
            monkeypatch.delenv("DSV41_WO_A_W8_DEQUANT_TOKENS", raising=False)
        else:
            monkeypatch.setenv("DSV41_WO_A_W8_DEQUANT_TOKENS", threshold)
        attn = _loaded(_attention(), weight)
        convert_wo_a_to_w8(attn)
        taken.clear()
        out = attn._apply_wo_a_w8(o[:tokens])
        torch.testing.assert_close(out, _reference(o[:tokens], weight), rtol=2**-6, atol=1e-3)
        return list(taken)

    assert paths("4", 4) == ["_wo_a_w8_dequantized"]
    assert paths("4", 9) == ["_wo_a_w8_dequantized"]
    assert paths("4", 3) == ["_wo_a_w8_torch"]
    assert paths("0", 9) == ["_wo_a_w8_torch"]  # 0: never dequantise
    assert paths(None, 9) == ["_wo_a_w8_torch"]
    # The default, from series.toml through the generated guards: prefill sizes.
    assert _attention().wo_a_w8_dequant_tokens == 1024
    monkeypatch.setenv("DSV41_WO_A_W8_DEQUANT_TOKENS", "-1")
    with pytest.raises(ValueError, match="DSV41_WO_A_W8_DEQUANT_TOKENS must be >= 0"):
        _attention()


@pytest.mark.guard_on
def test_one_pass_dequantisation_is_torchs_bit_for_bit_in_the_interpreter():
    # The prefill path's Triton dequantisation (TRITON_INTERPRET=1 runs it on
    # CPU tensors): every e4m3 code, zeros and subnormals included, times
    # power-of-two scales gives exactly torch's bf16; and the dispatch through
    # it matches the bf16 reference.
    script = textwrap.dedent(
        """
        import sys, torch
        sys.path.insert(0, %r)
        from test_wo_a_w8 import GROUPS, RANK, IN_DIM, _checkpoint_like_weight, _reference
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
        out = w8.wo_a_w8_matmul(o, codes, scale, dequant_tokens=11)
        assert calls == [1], calls
        torch.testing.assert_close(out, _reference(o, weight), rtol=2**-6, atol=1e-3)
        print("ok")
        """
        % str(Path(__file__).parent)
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "DSV41_WO_A_W8": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


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
