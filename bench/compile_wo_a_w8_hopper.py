"""Compile bench/wo_a_w8_hopper.py's kernels for sm_90a without a GPU, and say
whether Triton warp-specialised them (a ttg.warp_specialize region in the
TTGIR, setmaxnreg in the PTX), with registers, shared memory and the SASS
counts of HGMMA / TMA loads and stores / local-memory spills.

    python3 -m venv /tmp/t36 && /tmp/t36/bin/pip install triton==3.6.0   # the lent H200's triton
    /tmp/t36/bin/python bench/compile_wo_a_w8_hopper.py

Needs only triton (its wheel carries ptxas and cuobjdump); no torch, no GPU.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wo_a_w8_hopper as hop  # noqa: E402

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
TARGET = GPUTarget("cuda", 90, 32)
# (persistent, ws, flatten, w_left, deq, store_tma), (BM, BN, BK, warps, stages)
CASES = [
    ((False, False, False, True, 0, False), (256, 128, 64, 8, 4)),
    ((False, True, False, True, 0, False), (256, 128, 64, 8, 4)),  # warp_specialize on the k-loop
    ((True, True, True, True, 0, True), (256, 128, 64, 8, 3)),  # on the persistent tile loop
    ((True, True, True, False, 1, True), (128, 256, 64, 8, 3)),  # tutorial 09's bf16 form and tile
    ((True, True, True, False, 1, True), (128, 128, 64, 4, 3)),
    ((True, True, False, False, 1, True), (128, 128, 64, 4, 3)),  # unflattened, 4 warps
]


def compile_case(form, tiles, shape=(16, 1024, 1024)):
    persistent, ws, flatten, w_left, deq, store_tma = form
    bm, bn, bk, warps, stages = tiles
    groups, rows, dim = shape
    wdt = "bf16" if deq == 1 else "fp8e4nv"
    signature = {"x_desc": f"tensordesc<bf16[{bm},{bk}]>", "w_desc": f"tensordesc<{wdt}[{bn},{bk}]>",
                 "y_desc": f"tensordesc<bf16[{bm},{bn}]>", "S": "*fp32", "Y": "*bf16", "T": "i32"}
    consts = dict(R=rows, D=dim, G=groups, BM=bm, BN=bn, BK=bk, W_LEFT=w_left, DEQ=deq, STORE_TMA=store_tma,
                  F32_DOT=False)
    if persistent:
        fn = hop.w8_tma_persistent_kernel
        consts.update(WS=ws, FLATTEN=flatten, NUM_SMS=132)
    else:
        fn = hop.w8_tma_kernel
        consts.update(WS_K=ws)
    signature.update({name: "constexpr" for name in consts})
    return triton.compile(ASTSource(fn, signature, constexprs=consts), target=TARGET,
                          options={"num_warps": warps, "num_stages": stages})


def main() -> int:
    print(f"triton {triton.__version__}, target sm_90a")
    for form, tiles in CASES:
        try:
            kernel = compile_case(form, tiles)
        except Exception as error:  # noqa: BLE001 - a pass failure is a result here
            print(f"{form} {tiles}: compilation failed ({type(error).__name__})")
            continue
        with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
            cubin.write(kernel.asm["cubin"])
            cubin.flush()
            usage = subprocess.run([os.path.join(BIN, "cuobjdump"), "-res-usage", cubin.name],
                                   capture_output=True, text=True).stdout
            sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", cubin.name],
                                  capture_output=True, text=True).stdout
        ops = {op: sass.count(op) for op in ("HGMMA", "UTMALDG", "UTMASTG", "LDL", "STL")}
        regs = re.findall(r"REG:(\d+)", usage)
        print(f"{form} {tiles}: regs {regs} smem {kernel.metadata.shared} "
              f"warp-specialised {'ttg.warp_specialize' in kernel.asm['ttgir']} "
              f"setmaxnreg {'setmaxnreg' in kernel.asm['ptx']} {ops}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
