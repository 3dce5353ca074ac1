"""wo_a_w8 at prefill sizes, third sweep (H200): TMA kernel forms, and the
dequantisation overlapped with the attention before wo_a.

Timed as bench_wo_a_w8_gpu.py times (CUDA graphs of 8 calls on 8 cold-L2
operand sets, median of 3 runs), in one process:

Stage A, kernels: stock's bf16 GEMM (cuBLAS einsum), the shipped W8 kernel
(its tile table), the shipped one-pass dequantisation + einsum, and the TMA
forms of bench/wo_a_w8_hopper.py (one tile per program or persistent, pointer
or TMA store, swap-AB or not; and the same kernel on a bf16 weight, Triton's
own ceiling) over a tile list; every result checked against the bf16 one.

Stage B, overlap: a stand-in for the work before wo_a (SDPA attention, 32
heads x 128, 2048 keys per token, like a top-2048 sparse attention; or a
cuBLAS GEMM [T, 7168] x [7168, 1536] like wq_a, which holds every SM), then
wo_a. Variants: stock (stand-in; einsum), inline (stand-in; dequant + einsum),
side (dequant forked onto a side stream before the stand-in, joined before
the einsum; also a high-priority side stream), kern (stand-in; W8 kernel).
wo_a's cost = graph time - the stand-in's alone, so overlapped work counts
where it slows the stand-in or is not hidden.

Stage C: the one-pass dequantisation's tiles (rows and columns per program).

Stage D: stage B's side stream against a layer-like stand-in of several kernels
(norm, wq_a-like GEMM, norm, wq_b-like GEMM, SDPA, an elementwise op).

    PYTHONUNBUFFERED=1 python3 bench/sweep_wo_a_w8_hopper.py KERNEL_FILE [--budget-s 420] [--json OUT.json] [--stages ABCD]

KERNEL_FILE: the patched sglang's kernels/ops/gemm/dsv4_wo_a_w8.py.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import multiprocessing
import os
import statistics
import sys
import time

import torch
import triton
import triton.language as tl

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wo_a_w8_hopper as hop  # noqa: E402
from bench_wo_a_w8_gpu import SETS, _Graph  # noqa: E402

SHAPES = ((8, 256, 512), (16, 1024, 1024))
TOKENS_A = (128, 256, 300, 512, 1024, 2048, 4096, 8192)
TOKENS_B = (256, 512, 1024, 2048, 4096, 8192)
# form: (persistent, ws, flatten, w_left, deq, store_tma)
FORMS_MAIN = [(False, False, False, True, 0, False), (False, False, False, True, 0, True),
              (True, False, True, True, 0, True), (True, False, True, True, 0, False)]
FORMS_EXTRA = [(False, False, False, False, 0, True), (True, False, False, True, 0, True),
               (True, False, True, True, 1, True), (False, False, False, True, 1, True)]
TILES_MAIN = [(256, 128, 64, 8, 3), (256, 128, 64, 8, 4), (128, 128, 64, 8, 4), (128, 128, 128, 8, 3),
              (128, 256, 64, 8, 3), (256, 64, 64, 4, 3), (128, 64, 128, 4, 4), (64, 128, 128, 4, 4),
              (128, 128, 64, 4, 4), (64, 256, 64, 8, 4), (128, 256, 128, 8, 2)]
TILES_EXTRA = [(256, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3)]


def candidates():
    return [(f, t) for f in FORMS_MAIN for t in TILES_MAIN] + [(f, t) for f in FORMS_EXTRA for t in TILES_EXTRA]


def _load(path):
    spec = importlib.util.spec_from_file_location("dsv4_wo_a_w8", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _warm(jobs):
    """Compile a share of the candidates (a worker process): the Triton cache is shared."""
    failed = []
    for form, tiles, shape in jobs:
        groups, rows, dim = shape
        if rows % tiles[1] or dim % tiles[2]:
            continue
        w = torch.zeros(groups * rows, dim, device="cuda").to(torch.bfloat16 if form[4] == 1 else torch.float8_e4m3fn)
        s = torch.ones(groups * rows // 32, dim // 32, device="cuda")
        for tokens in (256, 300):
            try:
                hop.w8_tma(torch.zeros(tokens, groups, dim, device="cuda", dtype=torch.bfloat16), w, s, tiles, form)
            except Exception as error:  # noqa: BLE001
                failed.append((form, tiles, shape, f"{type(error).__name__}: {str(error)[:120]}"))
                break
    torch.cuda.synchronize()
    return failed


def precompile(workers):
    jobs = [(f, t, s) for f, t in candidates() for s in SHAPES]
    chunks = [jobs[i::workers] for i in range(workers)]
    ctx = multiprocessing.get_context("spawn")
    failed = []
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        for result in pool.map(_warm, chunks):
            failed.extend(result)
    return failed


def timed(call, sets, runs=3):
    graph = _Graph(call, sets)
    return statistics.median(graph.run() for _ in range(runs))


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@triton.jit
def _dequant_rb(W, S, OUT, D: tl.constexpr, RB: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * RB + tl.arange(0, RB)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    s = tl.load(S + (r[:, None] // 32) * (D // 32) + c[None, :] // 32)
    w = tl.load(W + r[:, None] * D + c[None, :])
    tl.store(OUT + r[:, None] * D + c[None, :], (w.to(tl.float32) * s).to(tl.bfloat16))


def dequant_rb(codes, scale, rb, bc, warps):
    rows, dim = codes.shape
    out = torch.empty((rows, dim), dtype=torch.bfloat16, device=codes.device)
    _dequant_rb[(rows // rb, dim // bc)](codes, scale, out, dim, RB=rb, BC=bc, num_warps=warps)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("kernel_file")
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--json", default=None)
    parser.add_argument("--stages", default="ABC")
    args = parser.parse_args()
    start = time.monotonic()
    w8 = _load(args.kernel_file)
    props = torch.cuda.get_device_properties(0)
    num_sms = props.multi_processor_count
    print(f"device: {props.name} (SM {props.major}.{props.minor}, {num_sms} SMs), torch {torch.__version__}, "
          f"triton {triton.__version__}")
    print(f"us per call: CUDA graph of {SETS} calls on {SETS} operand sets (cold L2), median of 3 runs")
    record = {"device": props.name, "torch": torch.__version__, "triton": triton.__version__, "A": [], "B": [], "C": []}
    failed = {}
    if "A" in args.stages:
        t0 = time.monotonic()
        for form, tiles, shape, why in precompile(args.workers):
            failed[(form, tiles, shape)] = why
        print(f"precompiled {len(candidates())} candidates x {len(SHAPES)} shapes in {time.monotonic() - t0:.0f} s; "
              f"{len(failed)} failed")
        for (form, tiles, shape), why in sorted(failed.items(), key=str)[:30]:
            print(f"  failed {form} {tiles} {list(shape)}: {why}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for si, (groups, rows, dim) in enumerate(SHAPES):
        shape = (groups, rows, dim)
        weights = []
        for _ in range(SETS):
            weight = (torch.randn(groups * rows, dim, generator=gen, device="cuda") * 0.02).bfloat16()
            codes, scale = w8.quantize_wo_a_w8(weight)
            weights.append((codes, scale, w8.dequantize_wo_a_w8(codes, scale)))
        wsets = [(c, s) for c, s, _ in weights]
        w16 = [b.view(groups, rows, dim) for _, _, b in weights]
        if "A" in args.stages:
            print(f"\nstage A [{groups},{rows},{dim}]: us (ratio to bf16); best five candidates (form, tiles)")
            for tokens in TOKENS_A:
                if time.monotonic() - start > args.budget_s * (0.3 + 0.5 * si):
                    print("  stage A: budget reached")
                    break
                acts = [torch.randn(tokens, groups, dim, generator=gen, device="cuda").bfloat16() for _ in range(SETS)]
                ref = torch.einsum("tgd,grd->tgr", acts[0], w16[0])
                bf16 = timed(lambda x, w: torch.einsum("tgd,grd->tgr", x, w), list(zip(acts, w16, strict=True)))
                deq = timed(lambda x, cs: w8.wo_a_w8_matmul(x, *cs, dequant_tokens=1), list(zip(acts, wsets, strict=True)))
                kern = timed(lambda x, cs: w8._wo_a_w8_triton(x, *cs), list(zip(acts, wsets, strict=True)))
                results = []
                for form, tiles in candidates():
                    if (form, tiles, shape) in failed or rows % tiles[1] or dim % tiles[2]:
                        continue
                    wts = [(b.view(groups * rows, dim), sc) for b, (_, sc) in zip(w16, wsets, strict=True)] if form[4] == 1 else wsets
                    try:
                        out = hop.w8_tma(acts[0], *wts[0], tiles, form, num_sms)
                        err = rel(out, ref)
                        if not err < 2**-7:
                            results.append((float("inf"), form, tiles, f"wrong {err:.1e}"))
                            continue
                        t = timed(lambda x, cs, tiles=tiles, form=form: hop.w8_tma(x, *cs, tiles, form, num_sms),
                                  list(zip(acts, wts, strict=True)))
                        results.append((t, form, tiles, ""))
                    except Exception as error:  # noqa: BLE001
                        results.append((float("inf"), form, tiles, type(error).__name__))
                results.sort(key=lambda r: r[0])
                w8_only = [r for r in results if r[1][4] != 1 and r[0] < float("inf")]
                ceil = [r for r in results if r[1][4] == 1 and r[0] < float("inf")]
                wrong = [r for r in results if r[3].startswith("wrong")]
                print(f"T={tokens:>5} bf16 {bf16:7.1f} | shipped kern {kern:7.1f} ({kern / bf16:.2f}) deq+bf16 "
                      f"{deq:7.1f} ({deq / bf16:.2f}) | bf16 Triton ceiling "
                      + (f"{ceil[0][0]:.1f} ({ceil[0][0] / bf16:.2f}) {ceil[0][1]} {ceil[0][2]}" if ceil else "-")
                      + (f" | {len(wrong)} wrong" if wrong else ""))
                for t, form, tiles, _ in w8_only[:5]:
                    print(f"    {t:7.1f} ({t / bf16:.2f}) {form} {tiles}")
                record["A"].append({"shape": shape, "tokens": tokens, "bf16": bf16, "kern": kern, "deq": deq,
                                    "cands": [(t, f, tl_, why) for t, f, tl_, why in results if t < float("inf") or why]})
        if "B" in args.stages:
            print(f"\nstage B [{groups},{rows},{dim}]: wo_a cost = graph - stand-in alone, us (ratio to stock's)")
            side = torch.cuda.Stream()
            side_hi = torch.cuda.Stream(priority=-1)
            for standin in ("sdpa", "gemm"):
                for tokens in TOKENS_B:
                    if time.monotonic() - start > args.budget_s * (0.45 + 0.5 * si):
                        print("  stage B: budget reached")
                        break
                    acts = [torch.randn(tokens, groups, dim, generator=gen, device="cuda").bfloat16() for _ in range(SETS)]
                    if standin == "sdpa":
                        pre = [(torch.randn(1, 32, tokens, 128, generator=gen, device="cuda").bfloat16(),
                                torch.randn(1, 32, 2048, 128, generator=gen, device="cuda").bfloat16(),
                                torch.randn(1, 32, 2048, 128, generator=gen, device="cuda").bfloat16()) for _ in range(SETS)]

                        def run_pre(p):
                            return torch.nn.functional.scaled_dot_product_attention(*p)
                    else:
                        pre = [(torch.randn(tokens, 7168, generator=gen, device="cuda").bfloat16(),
                                torch.randn(7168, 1536, generator=gen, device="cuda").bfloat16()) for _ in range(SETS)]

                        def run_pre(p):
                            return p[0] @ p[1]
                    sets = [(a, *cs, w, p_) for a, cs, w, p_ in zip(acts, wsets, w16, pre, strict=True)]

                    def v_alone(x, c, s, w, p):
                        return run_pre(p)

                    def v_stock(x, c, s, w, p):
                        return run_pre(p), torch.einsum("tgd,grd->tgr", x, w)

                    def v_inline(x, c, s, w, p):
                        return run_pre(p), w8.wo_a_w8_matmul(x, c, s, dequant_tokens=1)

                    def v_kern(x, c, s, w, p):
                        return run_pre(p), w8._wo_a_w8_triton(x, c, s)

                    def make_side(stream):
                        def v_side(x, c, s, w, p):
                            main_stream = torch.cuda.current_stream()
                            stream.wait_stream(main_stream)
                            with torch.cuda.stream(stream):
                                copy = w8.dequantize_wo_a_w8_triton(c, s)
                            y = run_pre(p)
                            main_stream.wait_stream(stream)
                            if not torch.cuda.is_current_stream_capturing():
                                copy.record_stream(main_stream)
                            return y, torch.einsum("tgd,grd->tgr", x, copy.view(w.shape)), copy
                        return v_side

                    # correctness of the side-stream variant (eager)
                    out = make_side(side)(*sets[0])[1]
                    torch.cuda.synchronize()
                    err = rel(out, torch.einsum("tgd,grd->tgr", acts[0], w16[0]))
                    t = {name: timed(fn, sets) for name, fn in (
                        ("alone", v_alone), ("stock", v_stock), ("inline", v_inline), ("side", make_side(side)),
                        ("side_hi", make_side(side_hi)), ("kern", v_kern))}
                    t2 = timed(v_alone, sets)  # the stand-in again: drift
                    alone = min(t["alone"], t2)
                    cost = {k: v - alone for k, v in t.items() if k != "alone"}
                    print(f"{standin} T={tokens:>5} stand-in {alone:7.1f} (again {t2:7.1f}) | stock {cost['stock']:6.1f} | "
                          + " ".join(f"{k} {v:6.1f} ({v / cost['stock']:.2f})" for k, v in cost.items() if k != "stock")
                          + f" | side err {err:.1e}")
                    record["B"].append({"shape": shape, "tokens": tokens, "standin": standin, "alone": alone,
                                        "alone_again": t2, **{k: v for k, v in t.items() if k != "alone"}})
                    del pre, sets
        if "D" in args.stages:
            # Stage D: a layer-like stand-in of several kernels (norm, two GEMMs, norm, SDPA,
            # an elementwise op), whose boundaries leave the gaps a side-stream kernel can fill.
            print(f"\nstage D [{groups},{rows},{dim}]: layer-like stand-in; wo_a cost = graph - stand-in alone, us")
            side = torch.cuda.Stream()
            for tokens in (256, 1024, 4096):
                acts = [torch.randn(tokens, groups, dim, generator=gen, device="cuda").bfloat16() for _ in range(SETS)]
                pre = [(torch.randn(tokens, 7168, generator=gen, device="cuda").bfloat16(),
                        torch.randn(7168, 1536, generator=gen, device="cuda").bfloat16() / 64,
                        torch.randn(1536, 4096, generator=gen, device="cuda").bfloat16() / 32,
                        torch.randn(1, 32, 2048, 128, generator=gen, device="cuda").bfloat16(),
                        torch.randn(1, 32, 2048, 128, generator=gen, device="cuda").bfloat16()) for _ in range(SETS)]

                def layer(p):
                    h = torch.nn.functional.rms_norm(p[0], (7168,))
                    q = torch.nn.functional.rms_norm(h @ p[1], (1536,)) @ p[2]
                    q = q.view(1, -1, 32, 128).transpose(1, 2)
                    return torch.nn.functional.scaled_dot_product_attention(q, p[3], p[4]) * 0.5

                sets = [(a, *cs, w, p_) for a, cs, w, p_ in zip(acts, wsets, w16, pre, strict=True)]

                def d_alone(x, c, s, w, p):
                    return layer(p)

                def d_stock(x, c, s, w, p):
                    return layer(p), torch.einsum("tgd,grd->tgr", x, w)

                def d_inline(x, c, s, w, p):
                    return layer(p), w8.wo_a_w8_matmul(x, c, s, dequant_tokens=1)

                def d_side(x, c, s, w, p):
                    main_stream = torch.cuda.current_stream()
                    side.wait_stream(main_stream)
                    with torch.cuda.stream(side):
                        copy = w8.dequantize_wo_a_w8_triton(c, s)
                    y = layer(p)
                    main_stream.wait_stream(side)
                    if not torch.cuda.is_current_stream_capturing():
                        copy.record_stream(main_stream)
                    return y, torch.einsum("tgd,grd->tgr", x, copy.view(w.shape)), copy

                t = {name: timed(fn, sets) for name, fn in (("alone", d_alone), ("stock", d_stock),
                                                            ("inline", d_inline), ("side", d_side))}
                t2 = timed(d_alone, sets)
                alone = min(t["alone"], t2)
                cost = {k: v - alone for k, v in t.items() if k != "alone"}
                print(f"layer T={tokens:>5} stand-in {alone:7.1f} (again {t2:7.1f}) | stock {cost['stock']:6.1f} | "
                      + " ".join(f"{k} {v:6.1f} ({v / cost['stock']:.2f})" for k, v in cost.items() if k != "stock"))
                record["B"].append({"shape": shape, "tokens": tokens, "standin": "layer", "alone": alone,
                                    "alone_again": t2, **{k: v for k, v in t.items() if k != "alone"}})
                del pre, sets
        if "C" in args.stages and time.monotonic() - start < args.budget_s:
            print(f"\nstage C [{groups},{rows},{dim}]: dequantisation alone, us per call (graph of {SETS}, cold L2)")
            base = timed(lambda c, s: w8.dequantize_wo_a_w8_triton(c, s), wsets)
            line = [f"shipped {base:.1f}"]
            for rb, bc, warps in ((32, 256, 4), (32, 512, 4), (32, 512, 8), (64, 256, 4), (64, 256, 8), (32, 1024, 8),
                                  (64, 512, 8), (128, 256, 8)):
                if dim % bc:
                    continue
                if not torch.equal(dequant_rb(*wsets[0], rb, bc, warps), weights[0][2]):
                    line.append(f"({rb},{bc},{warps}) WRONG")
                    continue
                t = timed(lambda c, s, rb=rb, bc=bc, warps=warps: dequant_rb(c, s, rb, bc, warps), wsets)
                line.append(f"({rb},{bc},{warps}) {t:.1f}")
                record["C"].append({"shape": shape, "rb": rb, "bc": bc, "warps": warps, "us": t, "shipped": base})
            print("  " + ", ".join(line))
        del weights, wsets, w16
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, default=str)
    print(f"\ndone in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
