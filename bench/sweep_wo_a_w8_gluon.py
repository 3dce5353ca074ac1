"""bench/wo_a_w8_gluon.py's warp-specialised Gluon kernel against cuBLAS bf16, on the lent H200, one process.

For each wo_a shape and token count: every tile candidate is checked first (fresh random inputs, output
poisoned with NaN, relative Frobenius error against the bf16 product on the dequantised weight with fp32
accumulation, must be <= 2**-8 and every element written), then timed as bench_wo_a_w8_gpu.py times:
CUDA graph of 8 calls on 8 distinct weight/activation sets (cold L2), replayed >= 2 ms, time per call =
replay time / 8; RUNS runs interleaved with cuBLAS (torch.einsum on the bf16 weight), median.

    python bench/sweep_wo_a_w8_gluon.py

Standalone: needs torch and triton 3.6 with a Hopper GPU; the quantisation is the patch's (copied).
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
import wo_a_w8_gluon as k  # noqa: E402

SHAPES = ((8, 256, 512), (16, 1024, 1024))
TOKENS = (128, 256, 300, 320, 384, 512, 768, 1024, 2048, 4096, 8192)
SETS = 8
RUNS = 5
PAR = 1.05
FP8_MAX = torch.finfo(torch.float8_e4m3fn).max
# (tiles (BM, BN, BK, STAGES), TMA-store epilogue (None: when it fits), A mode (0: RS, waiting for each wgmma; 1: SS,
# the consumers write the converted tile to shared memory; 2: RS with one wgmma in flight), tail tiles or None, CVT):
# BM 128 = two consumer warpgroups, 64 = one; tail: the T mod BN last tokens by a second launch with those tiles;
# CVT: the converter-warpgroup kernel (wo_a_w8_gluon_cvt_kernel). Earlier runs' lists are in their result files
# (wo_a_w8_gluon_sweep.txt, wo_a_w8_gluon_persistent_sweep.txt), each candidate printed with its time.
TILES = [((128, 256, 64, 4), True, 0, None, False), ((64, 128, 64, 4), True, 2, None, False),
         # ("pp", (BN, BK, STAGES), programs or None, coop, tail): the persistent kernel (wo_a_w8_gluon_pp_kernel):
         # ping-pong (64-row tiles, one per consumer) or cooperative (128-row tiles, both consumers); tail: each tile
         # also takes the next `tail` tokens with a second wgmma of N = tail (tiles of BN + tail tokens)
         ("pp", (256, 64, 4), None, True, 0), ("pp", (256, 64, 3), None, True, 0), ("pp", (256, 64, 3), None, True, 64),
         ("pp", (128, 64, 4), None, True, 64), ("pp", (128, 64, 6), None, True, 0)]


def quantize(weight):  # the patch's quantize_wo_a_w8
    rows, cols = weight.shape
    blocks = weight.float().view(rows // 32, 32, cols // 32, 32)
    amax = blocks.abs().amax(dim=(1, 3))
    mantissa, exponent = torch.frexp(amax / FP8_MAX)
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)
    scale = torch.ldexp(torch.ones_like(amax), exponent)
    codes = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn)
    return codes.view(rows, cols), scale


def dequantize(codes, scale):  # the patch's dequantize_wo_a_w8
    rows, cols = codes.shape
    blocks = codes.float().view(rows // 32, 32, cols // 32, 32)
    return (blocks * scale[:, None, :, None]).view(rows, cols).to(torch.bfloat16)


def weights(groups, rows, dim, gen):
    w = (torch.randn(groups * rows, dim, generator=gen, device="cuda") * 0.02).bfloat16()
    codes, scale = quantize(w)
    return (codes.view(groups, rows, dim), scale.view(groups, rows // 32, dim // 32).contiguous(),
            dequantize(codes, scale).view(groups, rows, dim))


class Graph:
    def __init__(self, call, sets):
        for operands in sets:
            call(*operands)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outs = [call(*operands) for operands in sets]
        self.graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.graph.replay()
        end.record()
        end.synchronize()
        self.replays = max(3, int(2000.0 / max(start.elapsed_time(end) * 1000.0, 1.0)) + 1)

    def run(self):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(self.replays):
            self.graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0 / (self.replays * len(self.outs))


def rel_err(actual, expected):
    return ((actual.float() - expected).norm() / expected.norm()).item()


def run_cand(cand, o, codes, scale, out=None):
    if cand[0] == "pp":
        if out is None:
            out = torch.empty(o.shape[0], o.shape[1], codes.shape[1], device=o.device, dtype=torch.bfloat16)
        return k.launch_pp(o, codes.view(torch.float8_e4m3fn), scale, out, cand[1], programs=cand[2], coop=cand[3], tail=cand[4])
    tiles, epi, a_smem, tail, cvt = cand
    if tail is None:
        return k.wo_a_w8_gluon(o, codes, scale, tiles, epi_tma=epi, a_smem=a_smem, out=out, cvt=cvt)
    res = k.wo_a_w8_gluon_split(o, codes, scale, tiles, tail, epi_tma=epi, a_smem=a_smem, cvt=cvt)
    if out is not None:
        out.copy_(res)
    return res


def gluon_call(cand):
    def call(o, codes, scale):
        return run_cand(cand, o, codes, scale)
    return call


def valid(cand, rows):
    if cand[0] == "pp":
        return rows % (128 if cand[3] else 64) == 0
    return rows % cand[0][0] == 0 and (cand[3] is None or rows % cand[3][0] == 0)


def main():
    if "--large" in sys.argv:  # the [16,1024,1024] shape alone (a shorter device call)
        global SHAPES
        SHAPES = SHAPES[1:]
    props = torch.cuda.get_device_properties(0)
    print(f"# {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, device: {props.name} (SM {props.major}.{props.minor}, "
          f"{props.multi_processor_count} SMs), torch {torch.__version__}, triton {triton.__version__}", flush=True)
    print(f"# us per call: CUDA graph of {SETS} calls on {SETS} operand sets (cold L2), median of {RUNS} "
          f"interleaved runs; err = relative Frobenius error vs fp32-accumulated product on the dequantised bf16 weight",
          flush=True)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    summary = []
    t_start = time.time()
    # compile every (tiles, shape) once first (and catch compile failures)
    broken = set()
    for groups, rows, dim in SHAPES:
        codes, scale, _ = weights(groups, rows, dim, gen)
        o = torch.randn(300, groups, dim, generator=gen, device="cuda").bfloat16()
        for tiles in TILES:
            if not valid(tiles, rows):
                continue
            try:
                run_cand(tiles, o, codes, scale)
                torch.cuda.synchronize()
                print(f"# compiled and ran {tiles} for rows {rows}", flush=True)
            except Exception as error:  # noqa: BLE001
                broken.add((tiles, rows))
                print(f"compile/launch failed {tiles} {rows}: {type(error).__name__}: {str(error)[:300]}", flush=True)
    print(f"# compiled in {time.time() - t_start:.0f} s", flush=True)
    for groups, rows, dim in SHAPES:
        ws = [weights(groups, rows, dim, gen) for _ in range(SETS)]
        print(f"\nshape [{groups},{rows},{dim}]", flush=True)
        for tokens in TOKENS:
            acts = [torch.randn(tokens, groups, dim, generator=gen, device="cuda").bfloat16() for _ in range(SETS)]
            o = acts[0]
            codes, scale, bf16 = ws[0]
            ref = torch.einsum("tgd,grd->tgr", o.float(), bf16.float())
            cublas_err = rel_err(torch.einsum("tgd,grd->tgr", o, bf16), ref)
            ok = []
            for tiles in TILES:
                if not valid(tiles, rows) or (tiles, rows) in broken:
                    continue
                if tiles[0] != "pp" and tiles[3] is not None and tokens % tiles[0][1] == 0:
                    continue  # the split is the plain launch here
                # fresh inputs for the check too: a second weight set and activation set
                o2 = torch.randn(tokens, groups, dim, generator=gen, device="cuda").bfloat16()
                c2, s2, b2 = ws[1]
                ref2 = torch.einsum("tgd,grd->tgr", o2.float(), b2.float())
                errs = []
                for oo, cc, ss, rr in ((o, codes, scale, ref), (o2, c2, s2, ref2)):
                    out = torch.full((tokens, groups, rows), float("nan"), device="cuda", dtype=torch.bfloat16)
                    run_cand(tiles, oo, cc, ss, out=out)
                    torch.cuda.synchronize()
                    errs.append(rel_err(out, rr) if torch.isfinite(out).all() else float("inf"))
                err = max(errs)
                if err <= 2**-8:
                    ok.append((tiles, err))
                else:
                    print(f"  T={tokens} {tiles}: WRONG err {errs}", flush=True)
            variants = {"bf16": Graph(lambda x, w: torch.einsum("tgd,grd->tgr", x, w),
                                      [(a, w[2]) for a, w in zip(acts, ws, strict=True)])}
            for tiles, _ in ok:
                variants[tiles] = Graph(gluon_call(tiles), [(a, w[0], w[1]) for a, w in zip(acts, ws, strict=True)])
            runs = {name: [] for name in variants}
            for _ in range(RUNS):
                for name, graph in variants.items():
                    runs[name].append(graph.run())
            med = {name: statistics.median(v) for name, v in runs.items()}
            spread = (max(runs["bf16"]) - min(runs["bf16"])) / med["bf16"]
            errs = dict(ok)
            line = "  ".join(f"{tiles}: {med[tiles]:.1f} ({med[tiles] / med['bf16']:.2f})" for tiles, _ in ok)
            print(f"T={tokens:5d} bf16 {med['bf16']:7.1f} (spread {spread:.2f}, cuBLAS err {cublas_err:.1e}) | {line}",
                  flush=True)
            if ok:
                best = min((t for t, _ in ok), key=lambda t: med[t])
                summary.append(((groups, rows, dim), tokens, med["bf16"], med[best], med[best] / med["bf16"], best,
                                errs[best]))
            del variants
        del ws
        torch.cuda.empty_cache()
    print("\nsummary: best candidate per row")
    print(f"{'shape':18} {'T':>5} {'bf16 us':>8} {'gluon us':>8} {'ratio':>6} {'par':>5} {'err':>8}  (tiles (BM, BN, BK, STAGES), TMA-store epilogue, A in smem, tail tiles, CVT)")
    for shape, tokens, tb, tg, ratio, best, err in summary:
        print(f"{str(list(shape)):18} {tokens:5d} {tb:8.1f} {tg:8.1f} {ratio:6.2f} {'par' if ratio <= PAR else 'SLOW':>5} "
              f"{err:8.1e}  {best}")
    n_par = sum(1 for s in summary if s[4] <= PAR)
    print(f"on par (<= {PAR}) in {n_par} of {len(summary)} rows; worst {max(s[4] for s in summary):.2f}")
    print(f"# done in {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    try:
        main()
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(1)
