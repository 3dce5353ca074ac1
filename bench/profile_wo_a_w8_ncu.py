"""What bounds the persistent Hopper W8 kernel where it is slower than cuBLAS: Nsight Compute's
speed-of-light, memory and warp-stall sections for it and for stock's bf16 GEMM at the same sizes, on the
lent H200 (ncu is in its image).

    ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section ComputeWorkloadAnalysis -k regex:'wo_a_w8|gemm|Kernel' \
        python3 bench/profile_wo_a_w8_ncu.py

Each case launches its kernel three times (a warm-up and two); the report lists launches in the order
the cases print.

    python3 bench/profile_wo_a_w8_ncu.py --summarize ncu.txt     # one line per launch, under its case

(run anywhere: it reads the report only).
"""

from __future__ import annotations

import os
import re
import sys

# ncu's metrics per launch, in the order of the summary's columns
METRICS = (("us", "Duration"), ("SM %", "Compute (SM) Throughput"), ("DRAM %", "DRAM Throughput"),
           ("L2 %", "L2 Cache Throughput"), ("issue %", "Issue Slots Busy"),
           ("cyc/inst", "Warp Cycles Per Issued Instruction"))
TOP_PIPE = re.compile(r"(\w+) is the highest-utilized pipeline \(([\d.]+)%\)")
LAUNCH = re.compile(r"^  (\S+) (\(\d+, \d+, \d+\))x\(\d+, \d+, \d+\)", re.M)

# (shape, tokens, forms): the small shape where it is memory-bound; the large one at a full 256-token wave,
# in 256-token tiles and in 128-token ones (sweep run 3: ~25 % costlier per token), and at 300 tokens in
# the series' 256 + 64 tiles and in 128 + 64 ones. A form: (BN, TAIL, STAGES, PREFETCH, DEPTH).
CASES = (((8, 256, 512), 4096, ((256, 0, 4, False, 1),)),
         ((16, 1024, 1024), 256, ((256, 0, 4, False, 1), (128, 0, 6, True, 2))),
         ((16, 1024, 1024), 300, ((256, 64, 3, False, 1), (128, 64, 5, True, 2))))


def summarize(report: str) -> None:
    """Each case's launches from ncu's text report: kernel, grid, the METRICS and the busiest pipe."""
    cases = [line for line in report.splitlines() if line.startswith("case ")]
    launches = list(LAUNCH.finditer(report))
    print("kernel".ljust(52), "grid".ljust(12), " ".join(f"{name:>8}" for name, _ in METRICS), "top pipe")
    for n, launch in enumerate(launches):
        if n % 3 == 0 and n // 3 < len(cases):
            print(cases[n // 3])
        body = report[launch.end(): launches[n + 1].start() if n + 1 < len(launches) else len(report)]
        values = []
        for _, metric in METRICS:
            found = re.search(r"\n\s+" + re.escape(metric) + r"\s+\S+\s+([\d.,]+)\n", body)
            values.append(found.group(1) if found else "-")
        top = TOP_PIPE.search(body)
        print(launch.group(1)[:52].ljust(52), launch.group(2).ljust(12), " ".join(f"{v:>8}" for v in values),
              f"{top.group(1)} {top.group(2)} %" if top else "-")


def main():
    import torch
    import wo_a_w8_persistent_variants as v
    from sweep_wo_a_w8_gluon import weights

    gen = torch.Generator(device="cuda").manual_seed(1)
    for (groups, rows, dim), tokens, forms in CASES:
        codes, scale, w = weights(groups, rows, dim, gen)
        o = torch.randn(tokens, groups, dim, generator=gen, device="cuda").bfloat16()
        for form in (None,) + forms:
            print(f"case [{groups},{rows},{dim}] T={tokens} {form or 'bf16'}: a warm-up and 2 launches", flush=True)
            for _ in range(3):
                if form is None:
                    torch.einsum("tgd,grd->tgr", o, w)
                else:
                    v.wo_a_w8_persistent(o, codes.view(-1, dim), scale.view(-1, dim // 32), tiles=form[:3],
                                         prefetch=form[3], depth=form[4])
            torch.cuda.synchronize()

if __name__ == "__main__":
    if sys.argv[1:2] == ["--summarize"]:
        with open(sys.argv[2]) as report:
            summarize(report.read())
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        main()
