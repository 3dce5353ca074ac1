"""What each memo saves on the command it serves.

    python bench/bench_memos.py [-C SERIES_DIR] [--repeat 5]

The in-process memos (functools.lru_cache): each case runs a command's work the
way the CLI does (a fresh process's cold memos: cleared first), once with the
memos and once with them bypassed (the undecorated function), interleaved. The
one on disk (validate.RECORD_CHECKED: a release wheel's RECORD validated in full
once, its sha256 marked beside it in the cache): `forkbuild build-wheel --force`
as a process, with the marks and with them removed, interleaved. Each prints the
medians and the saving. docs/DESIGN.md keeps a memo only where it saves at least
20 % of a command users wait for.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.series.combination import of_variant
from forkbuild.wheel import builder, overlay, validate, zipraw
from forkbuild.wheel.builder import WheelRequest, build_wheels
from forkbuild.wheel.validate import RECORD_CHECKED

WHEEL_MEMOS = [(builder, "_zip_source"), (zipraw, "_deflate"), (zipraw, "_deflate_piece"),
               (overlay, "_upstream_rows"), (validate, "_verified_members_of")]


def timed(memos, enabled: bool, action: Callable[[], None]) -> float:
    originals = {(module, name): getattr(module, name) for module, name in memos}
    for (module, name), function in originals.items():
        function.cache_clear()
        if not enabled:
            setattr(module, name, function.__wrapped__)
    try:
        start = time.perf_counter()
        action()
        return time.perf_counter() - start
    finally:
        for (module, name), function in originals.items():
            setattr(module, name, function)


def case(title: str, memos, action: Callable[[], None], repeat: int,
         without_memo: Callable[[], None] | None = None) -> None:
    """`action` with the memos and without (`without_memo`: the action that bypasses them itself)."""
    action()  # warm the file system cache
    on, off = [], []
    for _ in range(repeat):
        on.append(timed(memos, True, action))
        off.append(timed(memos, False, without_memo or action))
    with_memo, without = statistics.median(on), statistics.median(off)
    print(f"| {title} | {with_memo:.3f} s | {without:.3f} s | {100 * (without - with_memo) / without:.0f} % |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-C", dest="series_dir", type=Path, default=Path.cwd())
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    context = Context.create(series_dir=args.series_dir, cache_dir=None, reporter=Reporter())
    series = context.series
    tp4, tp3 = of_variant(series, "tp4"), of_variant(series, "tp3")

    def wheels(*variants) -> Callable[[], None]:
        def build() -> None:
            with tempfile.TemporaryDirectory() as out:
                for variant in variants:  # every pinned Python tag, as build-wheel does
                    build_wheels(context=context, request=WheelRequest(variant=variant, out_dir=Path(out)))
        return build

    print("| command's work (one process) | with the memos | without | saved |\n|---|---|---|---|")
    case("build-wheel tp4 (both Python tags): wheel memos", WHEEL_MEMOS, wheels(tp4), args.repeat)
    case("build-wheel tp4 then tp3 (a matrix's next combination): wheel memos", WHEEL_MEMOS, wheels(tp4, tp3),
         args.repeat)
    marks = [context.upstream.wheels_dir / f"{pin.filename}{RECORD_CHECKED}" for pin in series.upstream.wheels]

    def process(marked: bool) -> Callable[[], None]:
        def build() -> None:
            if not marked:
                for mark in marks:
                    mark.unlink(missing_ok=True)
            with tempfile.TemporaryDirectory() as out:
                subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(context.series_dir), "--cache",
                                str(context.cache_dir), "build-wheel", "--variant", "tp4", "--force", "--out", out],
                               check=True, capture_output=True)
        return build

    case(f"`forkbuild build-wheel --variant tp4 --force` (a process, 4 wheels): the {RECORD_CHECKED} marks", [],
         process(True), args.repeat, without_memo=process(False))


if __name__ == "__main__":
    main()
