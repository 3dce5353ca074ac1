"""The series' persistent Hopper W8 kernel against tile widths and switches, on the lent H200.

bench/wo_a_w8_persistent_variants.py is dsv4_wo_a_w8_hopper (patches/wo-a-w8.patch) with switches:
PREFETCH (each k-step's block scales loaded one k-step ahead, under the wgmma in flight, and the next
tile's first ones under a tile's last k-step) and EARLY (the next k-step's fp8 tile read from shared
memory before waiting for the previous wgmma), and DIRECT (the epilogue stores from registers to global memory,
no shared-memory buffer, so the ring can be deeper), and DEPTH (2: two k-steps' wgmmas in flight instead of one),
and RING (one tile per program: the epilogue reuses ring stages whose last use both consumers released, so the
ring is one stage deeper; RING 2 for any number of tiles per program). Runs 1-2 swept PREFETCH, EARLY and DIRECT;
run 3 token blocks of 16-256 (+ a tail), PREFETCH and DEPTH; run 4 RING; run 5 (CASES below) RING 2, candidates
(BN, TAIL, STAGES, PREFETCH, DEPTH, RING).
Checks and timing are sweep_wo_a_w8_gluon.py's (poisoned output on two fresh sets within 2**-8 of the
fp32-accumulated product; CUDA graphs of 8 calls on 8 operand sets, cold L2; median of RUNS interleaved
runs with cuBLAS bf16).

    python bench/sweep_wo_a_w8_persistent.py
"""

from __future__ import annotations

import datetime
import os
import statistics
import sys
import time
import traceback

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wo_a_w8_persistent_variants as v  # noqa: E402
from sweep_wo_a_w8_gluon import PAR, RUNS, SETS, Graph, rel_err, weights  # noqa: E402

# run 5: RING 2 (any number of tiles per program: the epilogue goes through the stages of a tile's last two
# k-steps, which the producer loads again only once that tile's TMA stores have read them, so the ring is one
# stage deeper everywhere); run 4's RING 1 (one tile per program) where it applies. Run 3's CASES are at commit
# a31b42f, run 4's at ba4c6be. Candidates (BN, TAIL, STAGES, PREFETCH, DEPTH, RING).
CASES = (((8, 256, 512), (2048, 4096, 8192),
          [(256, 0, 4, False, 1, 0), (256, 0, 5, False, 1, 1), (256, 0, 5, False, 1, 2)]),
         ((16, 1024, 1024), (300, 384, 512, 576, 1024, 4096),
          [(256, 0, 4, False, 1, 0), (256, 0, 5, False, 1, 2), (256, 64, 3, False, 1, 0),
           (256, 64, 4, False, 1, 1), (256, 64, 4, False, 1, 2)]))


def applies(cand, tokens, groups, rows):
    """RING 1 needs one tile per program (at most the GPU's SMs)."""
    ring = len(cand) > 5 and cand[5] == 1
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return not ring or v.tile_count(tokens, groups, rows, cand[:3]) <= sms


def run(cand, o, codes, scale, out=None):
    bn, tail, stages, prefetch, depth, *ring = cand
    return v.wo_a_w8_persistent(o, codes.view(-1, codes.shape[-1]), scale.view(-1, scale.shape[-1]),
                                tiles=(bn, tail, stages), prefetch=prefetch, depth=depth, out=out,
                                ring=int(ring[0]) if ring else 0)


def main():
    props = torch.cuda.get_device_properties(0)
    print(f"# {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, device: {props.name} (SM {props.major}."
          f"{props.minor}, {props.multi_processor_count} SMs), torch {torch.__version__}, triton {triton.__version__}")
    print(f"# us per call: CUDA graph of {SETS} calls on {SETS} operand sets (cold L2), median of {RUNS} interleaved "
          f"runs; candidates (BN, TAIL, STAGES, PREFETCH, DEPTH[, RING])", flush=True)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    t_start = time.time()
    broken = set()
    for (groups, rows, dim), token_counts, candidates in CASES:
        codes, scale, _ = weights(groups, rows, dim, gen)
        for cand in candidates:
            tokens = next((t for t in token_counts if applies(cand, t, groups, rows)), None)
            if tokens is None:
                continue
            o = torch.randn(tokens, groups, dim, generator=gen, device="cuda").bfloat16()
            try:
                run(cand, o, codes, scale)
                torch.cuda.synchronize()
            except Exception as error:  # noqa: BLE001
                broken.add((cand, rows))
                print(f"compile/launch failed {cand} rows {rows}: {type(error).__name__}: {str(error)[:300]}")
    print(f"# compiled in {time.time() - t_start:.0f} s", flush=True)
    summary = []
    for (groups, rows, dim), token_counts, candidates in CASES:
        ws = [weights(groups, rows, dim, gen) for _ in range(SETS)]
        print(f"\nshape [{groups},{rows},{dim}]", flush=True)
        for tokens in token_counts:
            acts = [torch.randn(tokens, groups, dim, generator=gen, device="cuda").bfloat16() for _ in range(SETS)]
            ok = []
            for cand in candidates:
                if (cand, rows) in broken or not applies(cand, tokens, groups, rows):
                    continue
                errs = []
                for oo, (cc, ss, bb) in ((acts[0], ws[0]), (torch.randn_like(acts[0]), ws[1])):
                    ref = torch.einsum("tgd,grd->tgr", oo.float(), bb.float())
                    out = torch.full((tokens, groups, rows), float("nan"), device="cuda", dtype=torch.bfloat16)
                    run(cand, oo, cc, ss, out=out)
                    torch.cuda.synchronize()
                    errs.append(rel_err(out, ref) if torch.isfinite(out).all() else float("inf"))
                if max(errs) <= 2**-8:
                    ok.append(cand)
                else:
                    print(f"  T={tokens} {cand}: WRONG err {errs}", flush=True)
            graphs = {"bf16": Graph(lambda x, w: torch.einsum("tgd,grd->tgr", x, w),
                                    [(a, w[2]) for a, w in zip(acts, ws, strict=True)])}
            for cand in ok:
                graphs[cand] = Graph(lambda x, c, s, cand=cand: run(cand, x, c, s),
                                     [(a, w[0], w[1]) for a, w in zip(acts, ws, strict=True)])
            times = {name: [] for name in graphs}
            for _ in range(RUNS):
                for name, graph in graphs.items():
                    times[name].append(graph.run())
            med = {name: statistics.median(t) for name, t in times.items()}
            spread = (max(times["bf16"]) - min(times["bf16"])) / med["bf16"]
            line = "  ".join(f"{c}: {med[c]:.1f} ({med[c] / med['bf16']:.2f})" for c in ok)
            print(f"T={tokens:5d} bf16 {med['bf16']:7.1f} (spread {spread:.2f}) | {line}", flush=True)
            if ok:
                best = min(ok, key=lambda c: med[c])
                summary.append(((groups, rows, dim), tokens, med["bf16"], med[best], best))
            del graphs
        del ws
        torch.cuda.empty_cache()
    print("\nsummary: best candidate per row")
    for shape, tokens, tb, tg, best in summary:
        print(f"{str(list(shape)):18} {tokens:5d} {tb:8.1f} {tg:8.1f} {tg / tb:6.2f} "
              f"{'par' if tg / tb <= PAR else 'SLOW':>5}  {best}")
    print(f"on par (<= {PAR}) in {sum(1 for s in summary if s[3] / s[2] <= PAR)} of {len(summary)} rows")
    print(f"# done in {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    try:
        main()
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(1)
