"""mxfp8_backend: DSV41_MXFP8_BACKEND names the MXFP8 dense-GEMM backend.

What runs is sglang's resolution (fp8_utils.resolve_mxfp8_dense_gemm_backend,
resolve_block_fp8_mxfp8_backend), its dispatch, and Fp8LinearMethod's load-time
packing and apply. Stubbed are the platform probes (FlashInfer / DeepGEMM
availability, Blackwell) and the b12x package, whose kernels need an SM120/SM121
GPU: a fake ``b12x.gemm.mxfp8_linear`` in sys.modules implements the same API
(Weight, pack_weight, query_from_call, BlockscaledQuery, plan, mm, is_supported)
with torch on CPU, dequantising e8m0-scaled fp8 exactly.
"""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest
import torch

FEATURE = "mxfp8_backend"
ENV = "DSV41_MXFP8_BACKEND"


# -- the fake b12x package -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Weight:
    values: torch.Tensor
    scale_rows: torch.Tensor
    in_features: int
    out_features: int


@dataclasses.dataclass(frozen=True)
class _BlockscaledQuery:
    recipe: str
    num_tokens: int
    in_features: int
    out_features: int
    expected_m: int | None = None


@dataclasses.dataclass(frozen=True)
class _FixedBlockscaledQuery:
    recipe: str
    max_rows: int
    in_features: int
    out_features: int
    expected_m: int | None


@dataclasses.dataclass(frozen=True, eq=False)
class _Plan:
    query: object


def _dequantize(values: torch.Tensor, scale_u8: torch.Tensor) -> torch.Tensor:
    scale = torch.exp2(scale_u8.float() - 127.0).repeat_interleave(32, dim=1)
    return values.float() * scale


class FakeMxfp8Linear(types.ModuleType):
    """b12x.gemm.mxfp8_linear's API, computed with torch on CPU."""

    Weight = _Weight
    BlockscaledQuery = _BlockscaledQuery
    FixedBlockscaledQuery = _FixedBlockscaledQuery

    def __init__(self):
        super().__init__("b12x.gemm.mxfp8_linear")
        self.supported = True
        self.packed: list[_Weight] = []
        self.plans: list[_Plan] = []
        self.runs: list[tuple[int, _Plan]] = []

    def is_supported(self, device=None) -> bool:
        return self.supported

    def pack_weight(self, weight, scale=None, *, recipe=None):
        assert recipe == "mxfp8" and weight.dtype == torch.float8_e4m3fn
        n, k = weight.shape
        assert scale.dtype == torch.uint8 and tuple(scale.shape) == (n, k // 32)
        packed = _Weight(weight, scale.clone(), in_features=k, out_features=n)
        self.packed.append(packed)
        return packed

    def query_from_call(self, source, weight):
        if isinstance(source, tuple):
            rows = source[0].numel() // weight.in_features
            return _FixedBlockscaledQuery(
                "mxfp8", rows, weight.in_features, weight.out_features, expected_m=rows
            )
        rows = source.numel() // weight.in_features
        return _BlockscaledQuery("mxfp8", rows, weight.in_features, weight.out_features)

    def plan(self, query):
        made = _Plan(query)
        self.plans.append(made)
        return made

    def mm(self, source, weight, *, plan=None, bias=None):
        if isinstance(source, tuple):
            values, scale = source
            x = _dequantize(values.reshape(-1, weight.in_features), scale)
            rows, capacity, out_dtype = x.shape[0], plan.query.max_rows, torch.bfloat16
        else:
            x = source.reshape(-1, weight.in_features).float()
            rows, capacity, out_dtype = x.shape[0], plan.query.num_tokens, source.dtype
        # A plan serves every row count up to its capacity, never more.
        assert rows <= capacity and plan.query.out_features == weight.out_features
        self.runs.append((rows, plan))
        out = x @ _dequantize(weight.values, weight.scale_rows).t()
        if bias is not None:
            out = out + bias.float()
        return out.to(out_dtype).reshape(*source_shape(source)[:-1], weight.out_features)


def source_shape(source):
    return (source[0] if isinstance(source, tuple) else source).shape


@pytest.fixture
def fake_b12x(monkeypatch):
    mxfp8_linear = FakeMxfp8Linear()
    package, gemm = types.ModuleType("b12x"), types.ModuleType("b12x.gemm")
    package.__path__, gemm.__path__ = [], []
    package.gemm, gemm.mxfp8_linear = gemm, mxfp8_linear
    monkeypatch.setitem(sys.modules, "b12x", package)
    monkeypatch.setitem(sys.modules, "b12x.gemm", gemm)
    monkeypatch.setitem(sys.modules, "b12x.gemm.mxfp8_linear", mxfp8_linear)
    return mxfp8_linear


# -- sglang under a stubbed platform ---------------------------------------------


@pytest.fixture
def fp8_utils(monkeypatch):
    """fp8_utils on a CPU box: no FlashInfer, no DeepGEMM, sglang's auto runner."""
    from sglang.srt.layers.quantization import fp8_utils

    monkeypatch.setattr(fp8_utils, "FP8_GEMM_RUNNER_BACKEND", None)
    monkeypatch.setattr(fp8_utils, "is_flashinfer_available", lambda: False)
    monkeypatch.setattr(fp8_utils.deep_gemm_wrapper, "ENABLE_JIT_DEEPGEMM", False)
    return fp8_utils


@pytest.fixture
def blackwell_flashinfer(fp8_utils, monkeypatch):
    """A Blackwell CUDA box with FlashInfer, as far as fp8_utils' probes can tell."""
    platform = types.SimpleNamespace(is_blackwell=True, is_sm100=False, is_sm120=True)
    monkeypatch.setattr(fp8_utils, "get_platform", lambda: platform)
    monkeypatch.setattr(fp8_utils, "is_flashinfer_available", lambda: True)
    monkeypatch.setattr(fp8_utils, "_is_cuda", True)
    monkeypatch.setattr(fp8_utils, "get_device_sm", lambda: 121)
    # FlashInfer's CuTe-DSL MXFP8 probe (auto path only): none on this box.
    monkeypatch.setattr(
        fp8_utils,
        "_raw_flashinfer_mm_mxfp8",
        types.SimpleNamespace(is_backend_supported=lambda name, sm: False),
        raising=False,
    )
    return fp8_utils


def _block_fp8_layer(n=64, k=96, seed=0):
    """A [32, 32]-block ue8m0 FP8 linear as the checkpoint loader leaves it."""
    gen = torch.Generator().manual_seed(seed)
    layer = torch.nn.Module()
    weight = (torch.randn(n, k, generator=gen) * 4).to(torch.float8_e4m3fn)
    exponents = torch.randint(-4, 3, (n // 32, k // 32), generator=gen)
    layer.weight = torch.nn.Parameter(weight, requires_grad=False)
    layer.weight_scale_inv = torch.nn.Parameter(
        torch.exp2(exponents.float()), requires_grad=False
    )
    return layer


def _reference(layer, x):
    scale = layer.weight_scale_inv.repeat_interleave(32, 0).repeat_interleave(32, 1)
    return (x.float() @ (layer.weight.float() * scale).t()).to(x.dtype)


def _block_fp8_method():
    from sglang.srt.layers.quantization.fp8 import Fp8Config, Fp8LinearMethod

    config = Fp8Config(
        is_checkpoint_fp8_serialized=True, weight_block_size=[32, 32], scale_fmt="ue8m0"
    )
    return Fp8LinearMethod(config)


# -- guard off: stock resolution -------------------------------------------------


@pytest.mark.guard_off
@pytest.mark.parametrize("value", [None, ""])
def test_guard_off_cpu_resolves_like_stock(fp8_utils, fake_b12x, monkeypatch, value):
    if value is not None:
        monkeypatch.setenv(ENV, value)
    backend = fp8_utils.Mxfp8DenseGemmBackend
    assert fp8_utils.resolve_mxfp8_dense_gemm_backend() is backend.UNSUPPORTED
    assert fp8_utils.resolve_block_fp8_mxfp8_backend() is backend.UNSUPPORTED
    assert not fp8_utils.can_serve_block_fp8_as_mxfp8([32, 32], "ue8m0")
    assert fake_b12x.packed == [] and fake_b12x.plans == []


@pytest.mark.guard_off
@pytest.mark.parametrize(
    "runner, dense, block",
    [
        ("FLASHINFER_CUTLASS", "FLASHINFER_CUTLASS", "FLASHINFER_CUTLASS"),
        ("AUTO", "FLASHINFER_CUTLASS", "UNSUPPORTED"),
        ("TRITON", "FLASHINFER_CUTLASS", "UNSUPPORTED"),
    ],
)
def test_guard_off_follows_fp8_gemm_backend(
    blackwell_flashinfer, fake_b12x, monkeypatch, runner, dense, block
):
    fp8_utils = blackwell_flashinfer
    monkeypatch.setattr(
        fp8_utils, "FP8_GEMM_RUNNER_BACKEND", fp8_utils.Fp8GemmRunnerBackend[runner]
    )
    backend = fp8_utils.Mxfp8DenseGemmBackend
    assert fp8_utils.resolve_mxfp8_dense_gemm_backend() is backend[dense]
    assert fp8_utils.resolve_block_fp8_mxfp8_backend() is backend[block]


# -- guard on: the named backend -------------------------------------------------


@pytest.mark.guard_on
def test_b12x_resolves_and_dispatches_to_b12x(fp8_utils, fake_b12x, monkeypatch):
    monkeypatch.setenv(ENV, "b12x")
    b12x = fp8_utils.Mxfp8DenseGemmBackend("b12x")
    assert fp8_utils.resolve_mxfp8_dense_gemm_backend() is b12x
    assert fp8_utils.resolve_block_fp8_mxfp8_backend() is b12x
    assert fp8_utils.can_serve_block_fp8_as_mxfp8([32, 32], "ue8m0")
    assert fp8_utils.dispatch_block_fp8_mxfp8_linear(b12x) is fp8_utils.b12x_mxfp8_linear
    assert fp8_utils.dispatch_w8a8_mxfp8_linear() is fp8_utils.b12x_mxfp8_linear


@pytest.mark.guard_on
def test_b12x_linear_packs_once_and_plans_per_row_capacity(fp8_utils, fake_b12x, monkeypatch):
    monkeypatch.setenv(ENV, "b12x")
    monkeypatch.setattr(fp8_utils, "_B12X_PLANS", {})
    method = _block_fp8_method()
    assert method.block_fp8_as_mxfp8
    assert method.mxfp8_dense_backend is fp8_utils.Mxfp8DenseGemmBackend("b12x")
    layer = _block_fp8_layer()
    method._prepare_block_fp8_as_mxfp8(layer)
    assert layer.block_fp8_mxfp8_ready and fake_b12x.packed == [layer.weight_b12x]

    gen = torch.Generator().manual_seed(1)
    bias = torch.randn(64, generator=gen).to(torch.bfloat16)
    for rows in (3, 4, 5, 1):
        x = torch.randn(rows, 96, generator=gen).to(torch.bfloat16)
        out = method.apply(layer, x, bias=bias)
        expected = (_reference(layer, x).float() + bias.float()).to(torch.bfloat16)
        torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2)

    # Packed once at load; M=3 and M=4 share the capacity-4 plan, M=5 gets 8, M=1 gets 1.
    assert len(fake_b12x.packed) == 1
    capacities = [p.query.num_tokens for p in fake_b12x.plans]
    assert capacities == [4, 8, 1]
    assert [rows for rows, _ in fake_b12x.runs] == [3, 4, 5, 1]
    assert fake_b12x.runs[0][1] is fake_b12x.runs[1][1]


@pytest.mark.guard_on
def test_b12x_linear_takes_a_prequantized_input(fp8_utils, fake_b12x, monkeypatch):
    monkeypatch.setenv(ENV, "b12x")
    monkeypatch.setattr(fp8_utils, "_B12X_PLANS", {})
    layer = _block_fp8_layer()
    scale_u8 = fp8_utils.block_fp8_scale_to_mxfp8_e8m0(
        layer.weight_scale_inv, (64, 96), [32, 32]
    )
    packed = fp8_utils.pack_b12x_mxfp8_weight(layer.weight, scale_u8)
    values = torch.randn(2, 96).to(torch.float8_e4m3fn)
    x_scale = torch.full((2, 3), 128, dtype=torch.uint8)
    out = fp8_utils.b12x_mxfp8_linear(
        values, layer.weight, layer.weight_scale_inv, input_scale=x_scale,
        packed_weight=packed,
    )
    expected = _reference(layer, (values.float() * 2).to(torch.bfloat16))
    torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2)
    assert [p.query.max_rows for p in fake_b12x.plans] == [2]


@pytest.mark.guard_on
@pytest.mark.parametrize(
    "name, block_capable",
    [
        ("flashinfer_cutlass", True),
        ("flashinfer_cutedsl", True),
        ("flashinfer_trtllm", False),
        ("deep_gemm", False),
    ],
)
def test_upstream_names_override_the_fp8_gemm_backend(
    blackwell_flashinfer, monkeypatch, name, block_capable
):
    fp8_utils = blackwell_flashinfer
    monkeypatch.setattr(fp8_utils.deep_gemm_wrapper, "ENABLE_JIT_DEEPGEMM", True)
    # --fp8-gemm-backend=triton: stock would serve neither kind of layer as MXFP8 this way.
    monkeypatch.setattr(
        fp8_utils, "FP8_GEMM_RUNNER_BACKEND", fp8_utils.Fp8GemmRunnerBackend.TRITON
    )
    monkeypatch.setenv(ENV, name)
    chosen = fp8_utils.Mxfp8DenseGemmBackend(name)
    assert fp8_utils.resolve_mxfp8_dense_gemm_backend() is chosen
    if block_capable:
        assert fp8_utils.resolve_block_fp8_mxfp8_backend() is chosen
    else:
        with pytest.raises(ValueError, match=rf"{ENV}='{name}' cannot serve .*block-FP8"):
            fp8_utils.resolve_block_fp8_mxfp8_backend()


@pytest.mark.guard_on
@pytest.mark.parametrize("value", ["CUDNN", "B12X ", "triton", "unsupported"])
def test_unknown_name_fails_naming_the_valid_ones(fp8_utils, fake_b12x, monkeypatch, value):
    monkeypatch.setenv(ENV, value)
    valid = "flashinfer_cutlass, flashinfer_cutedsl, flashinfer_trtllm, deep_gemm"
    for resolve in (
        fp8_utils.resolve_mxfp8_dense_gemm_backend,
        fp8_utils.resolve_block_fp8_mxfp8_backend,
    ):
        with pytest.raises(ValueError) as failure:
            resolve()
        message = str(failure.value)
        assert f"{ENV}={value.strip()!r}" in message and valid in message
        assert "b12x" in message and "unsupported" not in message.split("valid names")[1]


@pytest.mark.guard_on
def test_the_recipes_cutlass_is_flashinfer_cutlass(blackwell_flashinfer, monkeypatch):
    fp8_utils = blackwell_flashinfer
    monkeypatch.setattr(
        fp8_utils, "FP8_GEMM_RUNNER_BACKEND", fp8_utils.Fp8GemmRunnerBackend.TRITON
    )
    monkeypatch.setenv(ENV, "cutlass")
    chosen = fp8_utils.Mxfp8DenseGemmBackend.FLASHINFER_CUTLASS
    assert fp8_utils.resolve_mxfp8_dense_gemm_backend() is chosen
    assert fp8_utils.resolve_block_fp8_mxfp8_backend() is chosen


@pytest.mark.guard_on
def test_the_recipes_cudnn_is_flashinfers_cudnn_gemm(blackwell_flashinfer, monkeypatch):
    fp8_utils = blackwell_flashinfer
    probed = []
    monkeypatch.setattr(
        fp8_utils,
        "_raw_flashinfer_mm_mxfp8",
        types.SimpleNamespace(
            is_backend_supported=lambda name, sm: probed.append((name, sm)) or name == "cudnn"
        ),
        raising=False,
    )
    monkeypatch.setenv(ENV, "cudnn")
    chosen = fp8_utils.resolve_block_fp8_mxfp8_backend()
    assert chosen is fp8_utils.Mxfp8DenseGemmBackend.FLASHINFER_CUDNN
    assert fp8_utils.resolve_mxfp8_dense_gemm_backend() is chosen
    assert ("cudnn", 121) in probed
    linear = fp8_utils.dispatch_block_fp8_mxfp8_linear(chosen)
    assert linear.func is fp8_utils.flashinfer_mxfp8_blockscaled_linear
    assert linear.keywords["backend"] == "cudnn"
    dense = fp8_utils.dispatch_w8a8_mxfp8_linear()
    assert dense.func is fp8_utils.flashinfer_mxfp8_blockscaled_linear
    assert dense.keywords["backend"] == "cudnn"


@pytest.mark.guard_on
def test_cudnn_without_flashinfers_cudnn_gemm_fails(blackwell_flashinfer, monkeypatch):
    monkeypatch.setenv(ENV, "cudnn")
    with pytest.raises(ValueError, match=rf"{ENV}='cudnn' needs FlashInfer's cuDNN MXFP8 GEMM"):
        blackwell_flashinfer.resolve_mxfp8_dense_gemm_backend()


@pytest.mark.guard_on
def test_b12x_without_the_package_fails_at_resolution(fp8_utils, monkeypatch):
    monkeypatch.setitem(sys.modules, "b12x", None)  # import b12x raises ImportError
    monkeypatch.setenv(ENV, "b12x")
    with pytest.raises(ValueError, match=rf"{ENV}='b12x' needs the b12x package"):
        fp8_utils.resolve_mxfp8_dense_gemm_backend()
    with pytest.raises(ValueError, match=rf"{ENV}='b12x' needs the b12x package"):
        _block_fp8_method()


@pytest.mark.guard_on
def test_b12x_on_an_unsupported_gpu_fails_at_resolution(fp8_utils, fake_b12x, monkeypatch):
    fake_b12x.supported = False
    monkeypatch.setenv(ENV, "b12x")
    with pytest.raises(ValueError, match=rf"{ENV}='b12x' needs an SM120/SM121 GPU"):
        fp8_utils.resolve_block_fp8_mxfp8_backend()


@pytest.mark.guard_on
def test_flashinfer_name_without_flashinfer_fails(fp8_utils, monkeypatch):
    monkeypatch.setenv(ENV, "flashinfer_cutlass")
    needs = rf"{ENV}='flashinfer_cutlass' needs the flashinfer package"
    with pytest.raises(ValueError, match=needs):
        fp8_utils.resolve_mxfp8_dense_gemm_backend()


# -- MXFP8 checkpoints: Fp8LinearMethod's weight post-processing -----------------


@pytest.fixture
def fake_flashinfer(monkeypatch):
    """FlashInfer's block_scale_interleave (a GPU package), recording what the
    linear method hands it: the swizzle itself is FlashInfer's, not the patch's."""
    calls = []

    def block_scale_interleave(scale):
        calls.append(scale.clone())
        return scale.flip(0)  # any layout change the test can tell from the input

    flashinfer = types.ModuleType("flashinfer")
    flashinfer.block_scale_interleave = block_scale_interleave
    monkeypatch.setitem(sys.modules, "flashinfer", flashinfer)
    return calls


def _mxfp8_layer(n=64, k=96, seed=2):
    """sglang's ReplicatedLinear of a native MXFP8 checkpoint (quant_method "mxfp8"),
    its weights as the loader fills them: e4m3 values, uint8 e8m0 bytes [N, K // 32].
    Returns (its Fp8LinearMethod, the layer)."""
    from sglang.srt.layers.linear import ReplicatedLinear
    from sglang.srt.layers.quantization.fp8 import Fp8Config

    config = Fp8Config(is_checkpoint_fp8_serialized=True, use_mxfp8=True)
    layer = ReplicatedLinear(k, n, bias=False, quant_config=config, params_dtype=torch.bfloat16)
    gen = torch.Generator().manual_seed(seed)
    layer.weight.data.copy_((torch.randn(n, k, generator=gen) * 4).to(torch.float8_e4m3fn))
    layer.weight_scale_inv.data.copy_(torch.randint(123, 131, (n, k // 32), generator=gen).to(torch.uint8))
    return layer.quant_method, layer


def _mxfp8_reference(layer, x):
    scale = torch.exp2(layer.weight_scale_inv.float() - 127.0).repeat_interleave(32, dim=1)
    return (x.float() @ (layer.weight.float() * scale).t()).to(x.dtype)


@pytest.mark.guard_off
def test_guard_off_mxfp8_cutlass_swizzles_the_scales(blackwell_flashinfer, fake_flashinfer, monkeypatch):
    fp8_utils = blackwell_flashinfer
    monkeypatch.setattr(fp8_utils, "FP8_GEMM_RUNNER_BACKEND", fp8_utils.Fp8GemmRunnerBackend.FLASHINFER_CUTLASS)
    method, layer = _mxfp8_layer()
    assert method.mxfp8_dense_backend is fp8_utils.Mxfp8DenseGemmBackend.FLASHINFER_CUTLASS
    method.process_weights_after_loading(layer)
    assert len(fake_flashinfer) == 1 and torch.equal(fake_flashinfer[0], layer.weight_scale_inv.data)
    assert torch.equal(layer.weight_scale_inv_swizzled, layer.weight_scale_inv.data.flip(0))


@pytest.mark.guard_on
def test_cudnn_mxfp8_weights_get_flashinfers_swizzled_scales(blackwell_flashinfer, fake_flashinfer, monkeypatch):
    fp8_utils = blackwell_flashinfer
    monkeypatch.setattr(
        fp8_utils, "_raw_flashinfer_mm_mxfp8",
        types.SimpleNamespace(is_backend_supported=lambda name, sm: name == "cudnn"), raising=False,
    )
    monkeypatch.setenv(ENV, "cudnn")
    method, layer = _mxfp8_layer()
    assert method.mxfp8_dense_backend is fp8_utils.Mxfp8DenseGemmBackend.FLASHINFER_CUDNN
    plain = layer.weight_scale_inv.data.clone()
    method.process_weights_after_loading(layer)
    # cuDNN reads FlashInfer's swizzled copy, like cutlass; the plain bytes stay for weight updates.
    assert len(fake_flashinfer) == 1 and torch.equal(fake_flashinfer[0], plain)
    assert torch.equal(layer.weight_scale_inv_swizzled, plain.flip(0))
    assert torch.equal(layer.weight_scale_inv.data, plain)


@pytest.mark.guard_on
def test_b12x_packs_an_mxfp8_checkpoints_own_scales(fp8_utils, fake_b12x, monkeypatch):
    monkeypatch.setenv(ENV, "b12x")
    monkeypatch.setattr(fp8_utils, "_B12X_PLANS", {})
    method, layer = _mxfp8_layer()
    assert method.mxfp8_dense_backend is fp8_utils.Mxfp8DenseGemmBackend("b12x")
    method.process_weights_after_loading(layer)
    # No block scales to convert: the checkpoint's e8m0 bytes are what b12x packs.
    assert fake_b12x.packed == [layer.weight_b12x]
    assert torch.equal(layer.weight_b12x.scale_rows, layer.weight_scale_inv.data)
    x = torch.randn(3, 96, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    out, _ = layer(x)  # the layer's forward: quant_method.apply
    torch.testing.assert_close(out, _mxfp8_reference(layer, x), rtol=1e-2, atol=1e-2)
    assert [rows for rows, _ in fake_b12x.runs] == [3]


@pytest.mark.guard_on
def test_gfx95_name_off_rocm_fails_naming_the_gpu(fp8_utils, fake_b12x, monkeypatch):
    # Even with b12x importable, a gfx95 name on a CUDA/CPU box is refused as such.
    monkeypatch.setenv(ENV, "gfx95_dot_scaled")
    with pytest.raises(ValueError, match=rf"{ENV}='gfx95_dot_scaled' needs a ROCm gfx95 GPU"):
        fp8_utils.resolve_mxfp8_dense_gemm_backend()


# -- absent: the feature is not built in -----------------------------------------


@pytest.mark.absent
def test_absent_guard_undeclared_and_resolution_stock(fp8_utils, fake_b12x, monkeypatch):
    from sglang.srt.environ import Envs

    assert not hasattr(Envs, ENV)
    assert "b12x" not in [b.value for b in fp8_utils.Mxfp8DenseGemmBackend]
    monkeypatch.setenv(ENV, "b12x")
    backend = fp8_utils.Mxfp8DenseGemmBackend
    assert fp8_utils.resolve_mxfp8_dense_gemm_backend() is backend.UNSUPPORTED
    assert fp8_utils.resolve_block_fp8_mxfp8_backend() is backend.UNSUPPORTED
