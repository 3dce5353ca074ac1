"""Table tiles at every token count, rows beyond T masked (shipped) vs clamped to T-1 (a variant of the
kernel file with a CLAMP constexpr, given as argv[1]); graph-timed like bench_wo_a_w8_gpu.py. Not adopted:
bench/results/wo_a_w8_clamp_rows.txt."""
import importlib.util, statistics, sys, os
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_wo_a_w8_gpu import SETS, _Graph
spec = importlib.util.spec_from_file_location("w8", sys.argv[1]); w8 = importlib.util.module_from_spec(spec); spec.loader.exec_module(w8)
gen = torch.Generator(device="cuda").manual_seed(0)
print("us per call (graph of 8 cold-L2 calls, median of 3): bf16 | kernel masked rows | kernel clamped rows | tiles")
for groups, rows, dim in ((8, 256, 512), (16, 1024, 1024)):
    weights = []
    for _ in range(SETS):
        wt = (torch.randn(groups * rows, dim, generator=gen, device="cuda") * 0.02).bfloat16()
        c, s = w8.quantize_wo_a_w8(wt); weights.append((c, s, w8.dequantize_wo_a_w8(c, s).view(groups, rows, dim)))
    for T in (1, 7, 16, 32, 48, 64, 100, 128, 200, 256, 300, 301, 384, 512, 700, 1000, 2048):
        acts = [torch.randn(T, groups, dim, generator=gen, device="cuda").bfloat16() for _ in range(SETS)]
        ref = torch.einsum("tgd,grd->tgr", acts[0], weights[0][2])
        for clamp in (False, True):
            out = w8._wo_a_w8_triton(acts[0], weights[0][0], weights[0][1], clamp=clamp)
            e = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            assert e < 2**-7, (T, clamp, e)
        tm = lambda call, sets: statistics.median(_Graph(call, sets).run() for _ in range(3))
        b = tm(lambda x, w: torch.einsum("tgd,grd->tgr", x, w), [(a, w[2]) for a, w in zip(acts, weights)])
        r = [tm(lambda x, c, s, cl=cl: w8._wo_a_w8_triton(x, c, s, clamp=cl), [(a, w[0], w[1]) for a, w in zip(acts, weights)]) for cl in (False, True)]
        print(f"[{groups},{rows},{dim}] T={T:>5} bf16 {b:6.1f} | masked {r[0]:6.1f} ({r[0]/b:.2f}) | clamped {r[1]:6.1f} ({r[1]/b:.2f}) | {w8._tiles(T, groups, rows, dim)}", flush=True)
    del weights
