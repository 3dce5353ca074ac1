"""wo_a_w8 on a CUDA GPU: the W8 layers' wo_a GEMM, as shipped, against stock's bf16 GEMM, one run.

For each wo_a shape and token count, in one process:
  bf16      stock's GEMM: bf16 einsum('tgd,grd->tgr') on the dequantised weight (cuBLAS)
  w8 kern   the W8 Triton kernel alone (e4m3 codes + 32x32 block scales; its tile table,
            split-K where the weight is long and narrow)
  deq+bf16  the one-pass Triton dequantisation to bf16, then the same bf16 einsum
  kept      the W8 layers as the model runs them with the bf16 weight kept (DROP off,
            the default): the W8 kernel below DSV41_WO_A_W8_BF16_TOKENS tokens, from
            it on stock's own bf16 GEMM on the kept weight (here: the bf16 column's
            call, which is what stock's forward makes in this form)
  pers      the persistent Hopper kernel alone (dsv4_wo_a_w8_hopper; SM 9.0 with
            Gluon, where its tiles fit; "-" where they do not)
  drop      as the model runs them with DSV41_WO_A_W8_DROP (no bf16 weight):
            wo_a_w8_matmul with the guards' thresholds: the persistent kernel
            from DSV41_WO_A_W8_PERSISTENT_TOKENS tokens on where it fills a
            wave (SM 9.0), else the Triton kernel below
            DSV41_WO_A_W8_DEQUANT_TOKENS tokens and deq+bf16 from it on
(the guards' defaults, read through the generated guards, unless the variables are
set). Each result is checked against the bf16 one first (relative error < 2**-7).

Timing (why: decode runs under CUDA graphs, and the per-rank weights fit the
H200's 60 MB L2, which a real forward pass evicts between two calls of a
layer): every variant is captured in a CUDA graph of 8 calls, each on its own
weight and activation set (8 sets: several times the L2, so every call starts
cold), replayed until >= 2 ms; time per call = replay time / 8. That is one
run; RUNS runs per variant, interleaved (bf16, w8, deq, kept, drop, bf16, ...),
and the table gives each variant's median. "On par" = median(kept or drop) <=
1.05 x median(bf16); the spread column is (max - min) / median of the bf16
runs, the noise against which 1.05 is read. Rows whose bf16 time is under
10 us are small kernels where one extra launch in the graph (~1-2 us) is
visible: they are judged by the same 1.05 and flagged "small".

    python bench/bench_wo_a_w8_gpu.py                 # the table
    python bench/bench_wo_a_w8_gpu.py --sweep         # also every tile candidate, best per token count (do_bench)
    python bench/bench_wo_a_w8_gpu.py --shapes 2x1024x4096   # the model's wo_a per rank at TP4 only

After the table, the token thresholds this run measured per shape
(wo_a_w8_thresholds.py): on another GPU (GB10), what to set in the variant's
[variants.<v>.env] of series.toml.

Needs the patched sglang importable (PYTHONPATH) and a CUDA GPU.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys

import torch
import triton
import triton.testing
from wo_a_w8_thresholds import HEADER, Timing, render

# [groups, rows, dim] of wo_a per rank. First DeepSeek-V4.1-Flash's own: o_groups 8
# (o_groups // attn_tp_size a rank), o_lora_rank 1024 rows, 4096 wide (the width
# deepseek_v4.py's fused V4.1 wo_a path checks; that kernel takes 2 or 4 groups, rank
# 1024). Then the two ends of the shapes probed on the H200 before it was added.
MODEL_SHAPE = (2, 1024, 4096)  # o_groups // attn_tp_size groups: TP4
SHAPES = (MODEL_SHAPE, (8, 256, 512), (16, 1024, 1024))
TOKENS = (1, 4, 7, 16, 32, 64, 128, 256, 300, 384, 512, 576, 1024, 2048, 4096, 8192)
SETS = 8
RUNS = 5
PAR = 1.05
# (BM, BN, BK, warps, stages, w_left): the token-left tiles that led a first
# sweep, and weight-left ones (the dequantised weight as wgmma's register operand).
CANDIDATES = [(16, 32, 128, 4, 3, False), (16, 64, 128, 4, 3, False), (64, 32, 128, 4, 3, False),
              (64, 128, 128, 4, 3, False), (128, 128, 64, 4, 3, False)] + [
    (bm, bn, bk, warps, 3, True)
    for bm, bn, bk in itertools.product((16, 32, 64, 128, 256), (64, 128), (64, 128))
    for warps in (4, 8)
]
SWEEP_TOKENS = (1, 16, 64, 128, 300, 1024, 4096)


def _weights(groups: int, rows: int, dim: int, generator: torch.Generator):
    from sglang.kernels.ops.gemm.dsv4_wo_a_w8 import dequantize_wo_a_w8, quantize_wo_a_w8

    weight = (torch.randn(groups * rows, dim, generator=generator, device="cuda") * 0.02).bfloat16()
    codes, scale = quantize_wo_a_w8(weight)
    bf16 = dequantize_wo_a_w8(codes, scale).view(groups, rows, dim)
    return codes, scale, bf16


def _time(fn, rep: int = 100) -> float:
    return triton.testing.do_bench(fn, warmup=rep // 4, rep=rep, return_mode="median") * 1000.0


class _Graph:
    """SETS calls of one variant, each on its own operand set, as one CUDA graph."""

    def __init__(self, call, sets):
        for operands in sets:  # compile / pick algorithms outside the capture
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

    def run(self) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(self.replays):
            self.graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0 / (self.replays * len(self.outs))


def _relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual.float() - expected.float()).norm() / expected.float().norm()).item()


def _graph_median(call, sets, runs: int = 3) -> float:
    """us per call: the median of `runs` timings of one _Graph of `call` over `sets`."""
    graph = _Graph(call, sets)
    return statistics.median(graph.run() for _ in range(runs))


def _time_correct(candidates, sets, reference, *, label: str) -> list:
    """[(us, key)], fastest first, of each (key, call) whose output on sets[0] is within
    2**-7 relative error of `reference`; the others are printed with why (the error, or
    what the launch raised: out of resources is not a candidate)."""
    results = []
    for key, call in candidates:
        try:
            error = _relative_error(call(*sets[0]), reference)
            if not error < 2**-7:
                print(f"  {label} {key}: relative error {error:.2e}", flush=True)
                continue
            results.append((_graph_median(call, sets), key))
        except Exception as error:  # noqa: BLE001 - out of resources: not a candidate
            print(f"  {label} {key}: {type(error).__name__}", flush=True)
    return sorted(results)


# (BN, TAIL, STAGES) of the persistent kernel: the series' two forms, then narrower
# token blocks (more tiles where the weight has few 128-row blocks, as the model's does).
PERSISTENT_FORMS = ((256, 0, 4), (256, 64, 3), (128, 0, 6), (128, 64, 4), (64, 0, 8))


def _sweep_persistent(hopper, o, codes, scale, reference) -> str:
    """Every persistent form on a program per SM (capped at its tiles) and on
    half as many, each checked against the bf16 result first; best five."""
    tokens, groups, dim = o.shape
    rows = codes.shape[0] // groups
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    timed = []
    for form in PERSISTENT_FORMS:
        n_tiles = hopper.tile_count(tokens, groups, rows, form)
        for programs in sorted({min(sms, n_tiles), max(1, min(sms, n_tiles) // 2)}):
            try:
                error = _relative_error(hopper.wo_a_w8_persistent(o, codes, scale, form, programs), reference)
                if not error < 2**-7:
                    print(f"  persistent {form} x {programs}: relative error {error:.2e}", file=sys.stderr)
                    continue
                timed.append((_time(lambda f=form, p=programs: hopper.wo_a_w8_persistent(o, codes, scale, f, p),
                                    rep=40), form, programs))
            except Exception as error:  # noqa: BLE001 - out of shared memory etc.: not a candidate
                print(f"  persistent {form} x {programs}: {type(error).__name__}: {str(error)[:120]}", file=sys.stderr)
    timed.sort()
    return ", ".join(f"{t:.1f} {form} x {programs}" for t, form, programs in timed[:5])


def _shapes(text: str) -> tuple:
    try:
        shapes = tuple(tuple(int(n) for n in item.split("x")) for item in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: want GROUPSxROWSxDIM[,...], e.g. 2x1024x4096") from None
    if any(len(shape) != 3 or min(shape) < 1 for shape in shapes):
        raise argparse.ArgumentTypeError(f"{text!r}: want GROUPSxROWSxDIM[,...], e.g. 2x1024x4096")
    return shapes


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweep", action="store_true", help="time every tile candidate too")
    parser.add_argument("--shapes", type=_shapes, default=SHAPES,
                        help="wo_a shapes per rank, GxRxD[,GxRxD...] (default: the model's, then the two ends)")
    parser.add_argument("--tokens", type=lambda text: tuple(int(n) for n in text.split(",")), default=TOKENS,
                        help="token counts, N[,N...] (default: 1 to 8192, 16 counts)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU: this benchmark runs on one", file=sys.stderr)
        return 2
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8 as w8
    from sglang.srt.environ import envs

    threshold = envs.DSV41_WO_A_W8_DEQUANT_TOKENS.get()
    persistent = envs.DSV41_WO_A_W8_PERSISTENT_TOKENS.get()
    hopper = w8._hopper_kernels(torch.cuda.current_device())
    bf16_from = envs.DSV41_WO_A_W8_BF16_TOKENS.get()
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name} (SM {props.major}.{props.minor}), torch {torch.__version__}, triton {triton.__version__}")
    print(f"kept (bf16 weight kept, the default): W8 kernel below {bf16_from} tokens, stock's bf16 GEMM from "
          f"{bf16_from} on (DSV41_WO_A_W8_BF16_TOKENS)")
    print(f"drop (DSV41_WO_A_W8_DROP): the persistent Hopper kernel from {persistent} tokens on where it fills a wave "
          f"(DSV41_WO_A_W8_PERSISTENT_TOKENS; {'available here' if hopper else 'NOT available here: not SM 9.0 or no Gluon'}), "
          f"else the W8 kernel below {threshold} tokens, dequantise + bf16 GEMM from {threshold} on "
          "(DSV41_WO_A_W8_DEQUANT_TOKENS)")

    def drop(x, c, s):  # the model's call under DROP (MqaAttentionBase._apply_wo_a_w8)
        return w8.wo_a_w8_matmul(x, c, s, dequant_tokens=threshold, persistent_tokens=persistent)
    print(f"times: us per call, median of {RUNS} interleaved runs; a run = CUDA-graph replays of {SETS} calls "
          f"on {SETS} distinct weight/activation sets (cold L2); on par = kept|drop / bf16 <= {PAR}")

    def kept_uses_bf16(tokens: int) -> bool:  # the model's MqaAttentionBase._wo_a_w8_takes, bf16 kept
        return 0 < bf16_from <= tokens
    generator = torch.Generator(device="cuda").manual_seed(0)
    verdicts = []
    sweep_lines = []
    measured: list[tuple[tuple[int, int, int], list[Timing]]] = []
    for groups, rows, dim in args.shapes:
        weights = [_weights(groups, rows, dim, generator) for _ in range(SETS)]
        measured.append(((groups, rows, dim), []))
        codes, scale, bf16 = weights[0]
        label = " (DeepSeek-V4.1-Flash's, per rank at TP4)" if (groups, rows, dim) == MODEL_SHAPE else ""
        print(f"\nwo_a [groups={groups}, rows={rows}, dim={dim}]{label}: W8 {codes.numel() / 2**20:.1f} MiB + scales, bf16 {bf16.numel() * 2 / 2**20:.1f} MiB")
        print(f"{'tokens':>7} {'bf16':>8} {'w8 kern':>8} {'deq+bf16':>8} {'pers':>8} {'kept':>8} {'drop':>8} "
              f"{'kern/bf16':>9} {'deq/bf16':>8} {'pers/bf16':>9} {'kept/bf16':>9} {'drop/bf16':>9} {'spread':>6}  "
              f"{'kept':<9} {'drop':<9} drop's path")
        for tokens in args.tokens:
            acts = [torch.randn(tokens, groups, dim, generator=generator, device="cuda").bfloat16() for _ in range(SETS)]
            o = acts[0]
            reference = torch.einsum("tgd,grd->tgr", o, bf16)
            pers_fits = hopper is not None and rows % hopper.TILE_ROWS == 0 and dim % hopper.BLOCK_K == 0
            for name, result in (("w8 kernel", w8.wo_a_w8_matmul(o, codes, scale)),
                                 ("deq+bf16", w8.wo_a_w8_matmul(o, codes, scale, dequant_tokens=1)),
                                 ("drop", drop(o, codes, scale)),
                                 *((("pers", hopper.wo_a_w8_persistent(o, codes, scale)),) if pers_fits else ())):
                error = _relative_error(result, reference)
                if not error < 2**-7:
                    print(f"{name} differs from bf16 at tokens={tokens}: relative error {error:.2e}", file=sys.stderr)
                    return 1
            variants = {
                "bf16": _Graph(lambda x, w: torch.einsum("tgd,grd->tgr", x, w),
                               [(a, w[2]) for a, w in zip(acts, weights, strict=True)]),
                "kern": _Graph(lambda x, c, s: w8.wo_a_w8_matmul(x, c, s),
                               [(a, w[0], w[1]) for a, w in zip(acts, weights, strict=True)]),
                "deq": _Graph(lambda x, c, s: w8.wo_a_w8_matmul(x, c, s, dequant_tokens=1),
                              [(a, w[0], w[1]) for a, w in zip(acts, weights, strict=True)]),
                "kept": (_Graph(lambda x, w: torch.einsum("tgd,grd->tgr", x, w),
                                [(a, w[2]) for a, w in zip(acts, weights, strict=True)]) if kept_uses_bf16(tokens)
                         else _Graph(drop, [(a, w[0], w[1]) for a, w in zip(acts, weights, strict=True)])),
                "drop": _Graph(drop, [(a, w[0], w[1]) for a, w in zip(acts, weights, strict=True)]),
            }
            if pers_fits:
                variants["pers"] = _Graph(hopper.wo_a_w8_persistent,
                                          [(a, w[0], w[1]) for a, w in zip(acts, weights, strict=True)])
            runs = {name: [] for name in variants}
            for _ in range(RUNS):
                for name, graph in variants.items():
                    runs[name].append(graph.run())
            med = {name: statistics.median(times) for name, times in runs.items()}
            spread = (max(runs["bf16"]) - min(runs["bf16"])) / med["bf16"]
            ratios = {mode: med[mode] / med["bf16"] for mode in ("kept", "drop")}
            verdict = {mode: ("par" if ratio <= PAR else "SLOWER") + (" small" if med["bf16"] < 10 else "")
                       for mode, ratio in ratios.items()}
            for mode in ("kept", "drop"):
                verdicts.append((mode, groups, rows, dim, tokens, ratios[mode], verdict[mode]))
            if w8._persistent_kernels(o, rows, persistent) is not None:
                block_n, tail, stages = hopper.tiles_for(tokens)
                n_tiles = hopper.tile_count(tokens, groups, rows, (block_n, tail, stages))
                sms = torch.cuda.get_device_properties(0).multi_processor_count
                ring, stages = hopper.ring_for((block_n, tail, stages), n_tiles, min(sms, n_tiles), dim // hopper.BLOCK_K)
                path = f"persistent {(block_n, tail, stages)}{' ring' if ring else ''} (BN, TAIL, STAGES)"
            elif 0 < threshold <= tokens:
                path = "dequantise + bf16"
            else:
                tiles, split = w8._split_k(tokens, groups, rows, dim, w8._tiles(tokens, groups, rows, dim))
                path = f"W8 kernel {tiles}" + (f" split-K {split}" if split > 1 else "")
            measured[-1][1].append(Timing(tokens, med["bf16"], med["kern"], med["deq"], med.get("pers")))
            pers = f"{med['pers']:>8.1f}" if "pers" in med else f"{'-':>8}"
            pers_ratio = f"{med['pers'] / med['bf16']:>9.2f}" if "pers" in med else f"{'-':>9}"
            print(f"{tokens:>7} {med['bf16']:>8.1f} {med['kern']:>8.1f} {med['deq']:>8.1f} {pers} {med['kept']:>8.1f} "
                  f"{med['drop']:>8.1f} {med['kern'] / med['bf16']:>9.2f} {med['deq'] / med['bf16']:>8.2f} "
                  f"{pers_ratio} {ratios['kept']:>9.2f} {ratios['drop']:>9.2f} {spread:>6.2f}  {verdict['kept']:<9} "
                  f"{verdict['drop']:<9} {path}")
            del variants
            if args.sweep and tokens in SWEEP_TOKENS:
                t_bf16 = _time(lambda: torch.einsum("tgd,grd->tgr", o, bf16))
                timed = []
                for tiles in CANDIDATES:
                    if rows % tiles[1] or dim % tiles[2]:
                        continue
                    try:
                        timed.append((_time(lambda: w8._wo_a_w8_triton(o, codes, scale, tiles), rep=40), tiles))
                    except Exception as error:  # noqa: BLE001 - out of shared memory etc.: not a candidate
                        print(f"  {tiles}: {type(error).__name__}", file=sys.stderr)
                timed.sort()
                sweep_lines.append(f"[{groups},{rows},{dim}] tokens={tokens:>5} bf16 {t_bf16:7.1f} | "
                                   + ", ".join(f"{t:.1f} {c}" for t, c in timed[:3]))
                if pers_fits:
                    sweep_lines.append(f"{'':>28}persistent (BN, TAIL, STAGES) x programs | "
                                       + _sweep_persistent(hopper, o, codes, scale, reference))
        del weights
        torch.cuda.empty_cache()
    if sweep_lines:
        print("\nsweep (do_bench, one weight set): best three tiles (BM, BN, BK, warps, stages, w_left) per token count")
        print("\n".join(sweep_lines))
    for mode in ("kept", "drop"):
        rows_of = [v for v in verdicts if v[0] == mode]
        slower = [v for v in rows_of if v[6].startswith("SLOWER")]
        print(f"\n{mode}: on par ({mode}/bf16 <= {PAR}) in {len(rows_of) - len(slower)} of {len(rows_of)} rows; "
              f"worst {mode}/bf16 {max(v[5] for v in rows_of):.2f}")
        for _, groups, rows, dim, tokens, ratio, verdict in slower:
            print(f"  slower: [{groups},{rows},{dim}] tokens={tokens}: {ratio:.2f} ({verdict})")
    print(f"\n{HEADER}")
    for shape, timings in measured:
        print(render(shape, timings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
