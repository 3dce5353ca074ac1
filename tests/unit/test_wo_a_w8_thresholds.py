"""bench/wo_a_w8_thresholds.py: the token thresholds a GPU run of the wo_a_w8
benchmark measured, read from the committed H200 runs (no torch, no GPU)."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def _module():
    spec = importlib.util.spec_from_file_location("wo_a_w8_thresholds", ROOT / "bench" / "wo_a_w8_thresholds.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    return module


thresholds_module = _module()
Timing = thresholds_module.Timing


def _guard_default(env: str) -> int:
    features = tomllib.loads((ROOT / "series.toml").read_text())["features"]
    (default,) = [guard["default"] for guard in features["wo_a_w8"]["guards"] if guard["env"] == env]
    return int(default)


def test_the_model_shapes_h200_run_gives_the_bf16_tokens_default_series_toml_ships():
    # DSV41_WO_A_W8_BF16_TOKENS = 33 came from this run (split-K's decode sizes,
    # the kernel 0.85-0.97x cuBLAS to 32 tokens, cuBLAS ahead from 33 on).
    ((shape, timings),) = thresholds_module.parse((RESULTS / "wo_a_w8_model_shape.txt").read_text())
    assert shape == (2, 1024, 4096) and [t.tokens for t in timings][:3] == [1, 4, 7]
    found = thresholds_module.thresholds(timings)
    assert found["DSV41_WO_A_W8_BF16_TOKENS"] == _guard_default("DSV41_WO_A_W8_BF16_TOKENS") == 33
    # DROP on this shape: dequantise + cuBLAS beats the kernel from 128 tokens, and the
    # persistent kernel never wins up to 2048 (1.71x where dequantise measured 1.15x).
    assert found["DSV41_WO_A_W8_DEQUANT_TOKENS"] == 128
    assert found["DSV41_WO_A_W8_PERSISTENT_TOKENS"] == 0
    assert "PERSISTENT_TOKENS=0 (never, up to 2048 tokens)" in thresholds_module.render(shape, timings)


def test_the_model_shapes_split_prefill_run_gives_the_dequant_tokens_default():
    # DSV41_WO_A_W8_DEQUANT_TOKENS = 257 came from this run: the weight-left split-K
    # kernel beats dequantise + cuBLAS to 256 tokens (16.9 vs 18.4 us), not from 257
    # (25.4 vs 17.5) to 2048; the decode thresholds stay as the run before measured
    # them, and the persistent kernel never wins on this shape.
    # Two calls of one wheel: 1-300 tokens, then 512-2048; read as one series.
    (shape, low), (again, high) = thresholds_module.parse(
        (RESULTS / "wo_a_w8_model_shape_split_prefill.txt").read_text())
    assert shape == again == (2, 1024, 4096)
    timings = low + high
    assert [t.tokens for t in timings] == [1, 32, 33, 64, 128, 256, 257, 300, 512, 1024, 2048]
    found = thresholds_module.thresholds(timings)
    assert found["DSV41_WO_A_W8_DEQUANT_TOKENS"] == _guard_default("DSV41_WO_A_W8_DEQUANT_TOKENS") == 257
    assert found["DSV41_WO_A_W8_BF16_TOKENS"] == _guard_default("DSV41_WO_A_W8_BF16_TOKENS") == 33
    assert found["DSV41_WO_A_W8_PERSISTENT_TOKENS"] == 0


def test_every_table_of_a_file_of_several_runs_is_read():
    # wo_a_w8_gpu.txt: two runs of the two ends; the large shape's persistent kernel
    # wins from 256 tokens, PERSISTENT_TOKENS' default.
    tables = thresholds_module.parse((RESULTS / "wo_a_w8_gpu.txt").read_text())
    assert [shape for shape, _ in tables] == [(8, 256, 512), (16, 1024, 1024)] * 2
    assert all(len(timings) == 16 for _, timings in tables)
    large = thresholds_module.thresholds(tables[1][1])
    assert large["DSV41_WO_A_W8_PERSISTENT_TOKENS"] == _guard_default("DSV41_WO_A_W8_PERSISTENT_TOKENS") == 256


def _timings(kern_minus_bf16: list[float], pers: list[float | None] | None = None) -> list:
    counts = [1, 64, 128, 256, 1024][: len(kern_minus_bf16)]
    pers = pers or [None] * len(counts)
    return [Timing(n, 10.0, 10.0 + d, 10.0 + d, p) for n, d, p in zip(counts, kern_minus_bf16, pers, strict=True)]


def test_a_threshold_is_where_the_path_wins_at_every_larger_count():
    found = thresholds_module.thresholds
    assert found(_timings([-1, -1, 1, 1, 1]))["DSV41_WO_A_W8_BF16_TOKENS"] == 128
    # A win at 64 that 128 takes back is noise, not the crossing.
    assert found(_timings([-1, 1, -1, 1, 1]))["DSV41_WO_A_W8_BF16_TOKENS"] == 256
    # The kernel still ahead at the largest count: never (the guards' 0).
    assert found(_timings([-1, 1, 1, 1, -1]))["DSV41_WO_A_W8_BF16_TOKENS"] == 0
    # A tie goes to the bf16 path (the same time without the W8 copy's second kernel).
    assert found(_timings([-1, 0, 0, 0, 0]))["DSV41_WO_A_W8_BF16_TOKENS"] == 64
    # Not run (no SM 9.0): no persistent threshold; a "-" row counts against it.
    assert found(_timings([1] * 5))["DSV41_WO_A_W8_PERSISTENT_TOKENS"] is None
    assert found(_timings([1] * 5, [50, 50, 5, None, 5]))["DSV41_WO_A_W8_PERSISTENT_TOKENS"] == 1024


def test_a_file_without_a_table_is_named(tmp_path, capsys):
    empty = tmp_path / "notes.txt"
    empty.write_text("device: NVIDIA H200\n")
    assert thresholds_module.main([str(empty)]) == 1
    assert f"{empty}: no table of bench_wo_a_w8_gpu.py in it" in capsys.readouterr().err
    assert thresholds_module.main([]) == 2
    assert thresholds_module.main([str(RESULTS / "wo_a_w8_model_shape.txt")]) == 0
    assert "[2,1024,4096]: DSV41_WO_A_W8_BF16_TOKENS=33;" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["wo_a_w8_model_shape.txt", "wo_a_w8_gpu.txt"])
def test_every_row_of_the_committed_runs_is_read(name):
    # A row the pattern missed would move a threshold silently: count the tables'
    # rows by their own shape (a token count, then the numbers) against the parse.
    text = (RESULTS / name).read_text()
    printed = sum(1 for line in text.splitlines()
                  if line[:7].strip().isdigit() and len(line.split()) >= 12)
    assert sum(len(timings) for _, timings in thresholds_module.parse(text)) == printed


def test_a_row_without_the_persistent_kernel_reads_as_not_run():
    # GB10 (no SM 9.0) prints "-" in the pers columns of every row.
    text = ("wo_a [groups=2, rows=1024, dim=4096] (DeepSeek-V4.1-Flash's, per rank at TP4): W8 8.0 MiB\n"
            " tokens     bf16  w8 kern deq+bf16     pers     kept     drop kern/bf16 deq/bf16 pers/bf16 ...\n"
            "    128     60.0     31.0     70.0        -     31.0     31.0      0.52     1.17         -      0.52 "
            "     0.52   0.01  par       par       W8 kernel (32, 64, 128, 4, 3, True)\n")
    ((shape, (timing,)),) = thresholds_module.parse(text)
    assert (shape, timing) == ((2, 1024, 4096), Timing(128, 60.0, 31.0, 70.0, None))
    assert thresholds_module.thresholds([timing]) == {
        "DSV41_WO_A_W8_BF16_TOKENS": 0, "DSV41_WO_A_W8_DEQUANT_TOKENS": 0, "DSV41_WO_A_W8_PERSISTENT_TOKENS": None}
