"""The wo_a_w8 token thresholds a run of bench_wo_a_w8_gpu.py measured, per wo_a shape.

The guards' defaults (series.toml) were measured on an H200; GB10, the target,
reads memory at a tenth of its bandwidth, so the W8 kernel (half the bytes of
the bf16 weight) may stay ahead of cuBLAS to far larger token counts there.
Each threshold is the smallest measured token count from which one path is at
least as fast as the other at every larger count measured (medians of the
run); "0" (the guards' "never") where the other path still wins at the
largest count:

  DSV41_WO_A_W8_BF16_TOKENS        kept mode: stock's bf16 GEMM vs the W8 kernel
  DSV41_WO_A_W8_DEQUANT_TOKENS     DROP: dequantise + bf16 GEMM vs the W8 kernel
  DSV41_WO_A_W8_PERSISTENT_TOKENS  DROP on SM 9.0: the persistent kernel vs the
                                   faster of those two (counts where its tiles
                                   do not fill a wave, "-" in the run, count
                                   against it)

bench_wo_a_w8_gpu.py prints them after its table; this reads a saved run too:

    python bench/wo_a_w8_thresholds.py bench/results/wo_a_w8_model_shape.txt

No torch here: the unit tests read the committed H200 runs with it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

SHAPE_LINE = re.compile(r"^wo_a \[groups=(\d+), rows=(\d+), dim=(\d+)\]")
ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+|-)\s")


@dataclass(frozen=True)
class Timing:
    """One token count's medians, us per call."""

    tokens: int
    bf16: float
    kern: float
    deq: float
    pers: float | None  # None: the persistent kernel did not run at this shape


def from_where(timings: Sequence[Timing], wins: Callable[[Timing], bool]) -> int:
    """The smallest measured count from which `wins` holds at every larger one; 0 if
    it does not hold at the largest."""
    threshold = 0
    for timing in sorted(timings, key=lambda t: t.tokens, reverse=True):
        if not wins(timing):
            break
        threshold = timing.tokens
    return threshold


def thresholds(timings: Sequence[Timing]) -> dict[str, int | None]:
    """Guard name -> threshold; PERSISTENT_TOKENS is None where the kernel never ran."""
    found: dict[str, int | None] = {
        "DSV41_WO_A_W8_BF16_TOKENS": from_where(timings, lambda t: t.bf16 <= t.kern),
        "DSV41_WO_A_W8_DEQUANT_TOKENS": from_where(timings, lambda t: t.deq <= t.kern),
        "DSV41_WO_A_W8_PERSISTENT_TOKENS": None,
    }
    if any(t.pers is not None for t in timings):
        found["DSV41_WO_A_W8_PERSISTENT_TOKENS"] = from_where(
            timings, lambda t: t.pers is not None and t.pers <= min(t.kern, t.deq))
    return found


def render(shape: tuple[int, int, int], timings: Sequence[Timing]) -> str:
    largest = max(t.tokens for t in timings)
    parts = []
    for name, value in thresholds(timings).items():
        if value is None:
            parts.append(f"{name}: - (the persistent kernel did not run here)")
        else:
            parts.append(f"{name}={value}" + (f" (never, up to {largest} tokens)" if value == 0 else ""))
    return f"  [{','.join(map(str, shape))}]: " + "; ".join(parts)


def parse(text: str) -> list[tuple[tuple[int, int, int], list[Timing]]]:
    """Each table of bench_wo_a_w8_gpu.py runs in `text` (a file may hold several
    runs): its shape and its rows, in the order printed."""
    tables: list[tuple[tuple[int, int, int], list[Timing]]] = []
    for line in text.splitlines():
        if match := SHAPE_LINE.match(line):
            tables.append(((int(match[1]), int(match[2]), int(match[3])), []))
        elif tables and (match := ROW.match(line)):
            tables[-1][1].append(Timing(int(match[1]), float(match[2]), float(match[3]), float(match[4]),
                                        None if match[5] == "-" else float(match[5])))
    return [(shape, rows) for shape, rows in tables if rows]


HEADER = ("thresholds this run measured (from the smallest token count where the path "
          "wins at every larger count measured; 0: never):")


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: python bench/wo_a_w8_thresholds.py <saved output of bench_wo_a_w8_gpu.py>", file=sys.stderr)
        return 2
    path = Path(argv[0])
    tables = parse(path.read_text(encoding="utf-8"))
    if not tables:
        print(f"{path}: no table of bench_wo_a_w8_gpu.py in it", file=sys.stderr)
        return 1
    print(HEADER)
    for shape, timings in tables:
        print(render(shape, timings))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
