"""Compile bench/wo_a_w8_gluon.py's kernel for sm_90a on a CPU (no GPU, no torch): registers, shared
memory, warp specialisation (setmaxnreg in the PTX) and SASS counts (HGMMA, TMA loads, spills).

    python3 -m venv /tmp/g36 && /tmp/g36/bin/pip install triton==3.6.0 pytest
    /tmp/g36/bin/python bench/compile_wo_a_w8_gluon.py [BM,BN,BK,STAGES[,A_SMEM[,EPI_TMA[,CVT]]] ...]

e.g. 128,256,64,4 (the RS kernel's large tile), 128,256,64,3,1 (SS), 128,256,64,3,0,1,1 (CVT). Dumps
/tmp/gluon_*.{sass,ptx,ttgir}.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "patches"))
import wo_a_w8_gluon as k  # noqa: E402
from test_wo_a_w8_hopper import wgmma_hazards  # noqa: E402  (the SASS reading the CPU test uses)

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
TARGET = GPUTarget("cuda", 90, 32)


def compile_case(tiles, shape=(16, 1024, 1024), producer_regs=40, fn=None, extra=None, epi_tma=True, a_smem=False):
    bm, bn, bk, stages = tiles
    nwg = min(bm // 64, 2)
    groups, rows, dim = shape
    xl = gl.NVMMASharedLayout.get_default_for([bn, bk], gl.bfloat16)
    wl = gl.NVMMASharedLayout.get_default_for([bm, bk], gl.float8e4nv)
    signature = {"x_desc": f"tensordesc<bf16[{bn},{bk}],{xl!r}>", "w_desc": f"tensordesc<fp8e4nv[{bm},{bk}],{wl!r}>",
                 "y_desc": f"tensordesc<bf16[{bn},{bm // min(bm // 64, 2)}],{gl.NVMMASharedLayout.get_default_for([bn, bm // min(bm // 64, 2)], gl.bfloat16)!r}>",
                 "S": "*fp32", "Y": "*bf16", "T": "i32", "ys_t": "i32"}
    maxnreg, consumer_regs = k.regs_for(nwg, bn, producer_regs)
    consts = dict(G=groups, R=rows, D=dim, BM=bm, BN=bn, BK=bk, STAGES=stages, NWG=nwg, CONSUMER_REGS=consumer_regs,
                  PRODUCER_REGS=producer_regs, EPI_TMA=epi_tma, A_SMEM=a_smem)
    if extra:
        consts.update(extra)
    signature.update({name: "constexpr" for name in consts})
    src = GluonASTSource(fn or k.wo_a_w8_gluon_kernel, signature, constexprs=consts)
    return triton.compile(src, target=TARGET, options={"num_warps": 4, "maxnreg": maxnreg})


def report(kernel, dump=None):
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([os.path.join(BIN, "cuobjdump"), "-res-usage", cubin.name],
                               capture_output=True, text=True).stdout
        sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", cubin.name],
                              capture_output=True, text=True).stdout
    if dump:
        for ext, text in (("sass", sass), ("ptx", kernel.asm["ptx"]), ("ttgir", kernel.asm["ttgir"])):
            with open(f"{dump}.{ext}", "w") as f:
                f.write(text)
    ops = {op: sass.count(op) for op in ("HGMMA", "UTMALDG", "LDS", "LDL", "STL", "F2FP", "SYNCS", "WARPGROUP")}
    regs = re.findall(r"REG:(\d+)", usage)
    return (f"regs {regs} smem {kernel.metadata.shared} wgmma operand hazards {wgmma_hazards(sass)} setmaxnreg "
            f"{re.findall(r'setmaxnreg[.a-z0-9]* *[0-9]*', kernel.asm['ptx'])} {ops}")


def compile_cvt(tiles, shape=(16, 1024, 1024), epi_tma=True, consumer_regs=208):
    bm, bn, bk, stages = tiles
    groups, rows, dim = shape
    xl = gl.NVMMASharedLayout.get_default_for([bn, bk], gl.bfloat16)
    wl = gl.NVMMASharedLayout.get_default_for([bm, bk], gl.float8e4nv)
    yl = gl.NVMMASharedLayout.get_default_for([bn, bm // 2], gl.bfloat16)
    signature = {"x_desc": f"tensordesc<bf16[{bn},{bk}],{xl!r}>", "w_desc": f"tensordesc<fp8e4nv[{bm},{bk}],{wl!r}>",
                 "y_desc": f"tensordesc<bf16[{bn},{bm // 2}],{yl!r}>",
                 "S": "*fp32", "Y": "*bf16", "T": "i32", "ys_t": "i32"}
    consts = dict(G=groups, R=rows, D=dim, BM=bm, BN=bn, BK=bk, STAGES=stages, CONSUMER_REGS=consumer_regs,
                  EPI_TMA=epi_tma)
    signature.update({name: "constexpr" for name in consts})
    src = GluonASTSource(k.wo_a_w8_gluon_cvt_kernel, signature, constexprs=consts)
    return triton.compile(src, target=TARGET, options={"num_warps": 4, "maxnreg": 168})


def compile_pp(tiles, shape=(16, 1024, 1024), consumer_regs=232, producer_regs=40):
    bn, bk, stages, coop, tail = tiles
    groups, rows, dim = shape
    wrows = 128 if coop else 64

    def desc(dtype, block):
        return f"tensordesc<{dtype}[{block[0]},{block[1]}],{gl.NVMMASharedLayout.get_default_for(block, getattr(gl, 'bfloat16' if dtype == 'bf16' else 'float8e4nv'))!r}>"

    tb = tail or bn
    signature = {"x_desc": desc("bf16", [bn, bk]), "xt_desc": desc("bf16", [tb, bk]), "w_desc": desc("fp8e4nv", [wrows, bk]),
                 "y_desc": desc("bf16", [bn, 64]), "yt_desc": desc("bf16", [tb, 64]), "S": "*fp32", "n_tiles": "i32", "TB": "i32"}
    consts = dict(R=rows, D=dim, BN=bn, BK=bk, STAGES=stages, CONSUMER_REGS=consumer_regs, PRODUCER_REGS=producer_regs,
                  COOP=bool(coop), TAIL=tail)
    signature.update({name: "constexpr" for name in consts})
    src = GluonASTSource(k.wo_a_w8_gluon_pp_kernel, signature, constexprs=consts)
    return triton.compile(src, target=TARGET, options={"num_warps": 4, "maxnreg": 168})


def main() -> int:
    cases = [tuple(int(v) for v in a.split(",")) for a in sys.argv[1:]] or [(128, 256, 64, 3), (128, 128, 64, 4)]
    print(f"triton {triton.__version__}, target sm_90a")
    for tiles in cases:
        if len(tiles) in (4, 5) and tiles[0] in (0, 1):  # COOP,BN,BK,STAGES[,TAIL]: the persistent kernel (0 ping-pong)
            kernel = compile_pp(tiles[1:4] + (tiles[0], tiles[4] if len(tiles) == 5 else 0))
            print(tiles, report(kernel, dump=f"/tmp/gluon_pp_{'_'.join(map(str, tiles))}"))
            continue
        if len(tiles) > 6 and tiles[6]:  # BM,BN,BK,STAGES,_,EPI,1: the converter variant
            kernel = compile_cvt(tiles[:4], epi_tma=bool(tiles[5]))
            print(tiles, report(kernel, dump=f"/tmp/gluon_cvt_{'_'.join(map(str, tiles[:4]))}"))
            continue
        kernel = compile_case(tiles[:4], a_smem=int(tiles[4]) if len(tiles) > 4 else 0, epi_tma=len(tiles) <= 5 or bool(tiles[5]))
        print(tiles, report(kernel, dump=f"/tmp/gluon_{'_'.join(map(str, tiles))}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
